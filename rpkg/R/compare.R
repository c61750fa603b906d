# The pooled synthetic-data fit beside the same model on the real data, as
# synthpop's compare.fit.synds.

#' Compare a pooled fit with the same model on the real data
#'
#' Refits the model of `pooled` (same formula, family and link, R's own
#' `glm`/`lm`) to `real_data` and puts the two side by side, coefficient by
#' coefficient, as synthpop's `compare.fit.synds()`:
#' \describe{
#'   \item{`std.diff`}{(estimate.syn - estimate.obs) / std.error.obs, the
#'     distance in real-data standard errors (synthpop's "Std. coef diff");}
#'   \item{`ci.overlap`}{the interval overlap of Karr et al. (2006),
#'     computed by the engine (`dpsynth.inference.compare.compare_table`):
#'     1 for identical intervals, negative when they do not overlap.}
#' }
#' The synthetic interval is the pooled one (the rule's variance and df);
#' the real-data interval is R's Wald interval at the same level, with a t
#' reference where the model estimates a dispersion (`lm`, gaussian,
#' Gamma, quasi families) and the normal otherwise, as `summary.glm()`.
#' Rows with missing model variables are dropped from the real fit (counted).
#'
#' Only the holder of the real data can run this: the result contains
#' real-data estimates, which are not differentially private.
#'
#' @param pooled A `dpsynth_pooled` object from [dp_glm()] or [dp_lm()].
#' @param real_data The real data.frame.
#' @return An object of class `dpsynth_compare`: a list with `table`
#'   (columns `term, estimate.syn, std.error.syn, conf.low.syn,
#'   conf.high.syn, estimate.obs, std.error.obs, statistic.obs, conf.low.obs,
#'   conf.high.obs, diff, std.diff, ci.overlap`), `mean_abs_std_diff`,
#'   `mean_ci_overlap`, `n_used`, `n_dropped`, `rule`, `m`, `model`,
#'   `conf.level`.
#' @examplesIf dpsynthr:::python_available()
#' d <- data.frame(x = rnorm(300))
#' d$y <- 1 + d$x + rnorm(300)
#' sch <- list(x = list(type = "numeric", lower = -4, upper = 4, bins = 16),
#'             y = list(type = "numeric", lower = -5, upper = 7, bins = 16))
#' s <- dp_synthesize(d, "independent", epsilon = 1, m = 3, seed = 1, schema = sch)
#' dp_compare(dp_lm(y ~ x, data = s), d)
#' @export
dp_compare <- function(pooled, real_data) {
  if (!inherits(pooled, "dpsynth_pooled") || is.null(pooled$formula)) {
    stop("`pooled` must be a dpsynth_pooled object from dp_glm() or dp_lm()", call. = FALSE)
  }
  if (!is.data.frame(real_data)) stop("`real_data` must be a data.frame", call. = FALSE)
  family <- if (identical(pooled$model, "glm")) family_object(pooled$family)
  res <- fit_one_dataset(pooled$model, pooled$formula, family, NULL, globalenv(), real_data)
  fit <- res$fit
  if (inherits(fit, "error")) {
    stop("the model could not be fitted to the real data: ", conditionMessage(fit), call. = FALSE)
  }
  level <- pooled$conf.level
  cf <- stats::coef(fit)
  se <- sqrt(diag(stats::vcov(fit)))[names(cf)]
  dispersion <- identical(pooled$model, "lm") ||
    !family$family %in% c("binomial", "poisson") && !grepl("^Negative Binomial", family$family)
  crit <- if (dispersion) stats::qt((1 + level) / 2, stats::df.residual(fit)) else stats::qnorm((1 + level) / 2)
  real <- data.frame(term = names(cf), estimate.obs = unname(cf), std.error.obs = unname(se),
                     statistic.obs = unname(cf / se), conf.low.obs = unname(cf - crit * se),
                     conf.high.obs = unname(cf + crit * se), stringsAsFactors = FALSE)
  # the comparison itself (differences, CI overlap) is the engine's compare_table
  cmp <- reticulate::import("dpsynth.inference.compare", convert = FALSE)
  table <- nan_to_na(pandas_to_r(py_try(cmp$compare_table(r_to_pandas(pooled$pooled), r_to_pandas(real)),
                                        "dp_compare")))
  both <- stats::complete.cases(table[c("std.diff", "ci.overlap")])
  n_used <- stats::nobs(fit)
  structure(list(table = table,
                 mean_abs_std_diff = if (any(both)) mean(abs(table$std.diff[both])) else NA_real_,
                 mean_ci_overlap = if (any(both)) mean(table$ci.overlap[both]) else NA_real_,
                 n_used = n_used, n_dropped = nrow(real_data) - n_used,
                 rule = pooled$rule, m = pooled$m, model = model_label(pooled), conf.level = level),
            class = "dpsynth_compare")
}

#' @export
format.dpsynth_compare <- function(x, digits = 3, ...) {
  tab <- x$table
  show <- data.frame(Synthetic = tab$estimate.syn, Observed = tab$estimate.obs, Diff = tab$diff,
                     `Std. coef diff` = tab$std.diff, `CI overlap` = tab$ci.overlap,
                     check.names = FALSE, row.names = tab$term)
  show[] <- lapply(show, function(v) round(v, digits))
  c("Call used to fit models to the synthetic data:", paste0("  ", x$model),
    sprintf("Pooled over m = %d synthetic data sets (rule %s); real data: %d rows used, %d dropped (missing values)",
            x$m, x$rule, x$n_used, x$n_dropped),
    "",
    "Differences between results based on synthetic and observed data:",
    utils::capture.output(print(show)),
    "",
    sprintf("Measures for %d synthetic data sets and %d coefficients", x$m, nrow(tab)),
    sprintf("Mean confidence interval overlap: %s", format(round(x$mean_ci_overlap, digits))),
    sprintf("Mean absolute std. coef diff: %s", format(round(x$mean_abs_std_diff, digits))),
    "(real-data estimates are not differentially private: do not release this comparison)")
}

#' @export
print.dpsynth_compare <- function(x, ...) {
  writeLines(format(x, ...))
  invisible(x)
}

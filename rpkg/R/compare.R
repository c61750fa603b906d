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
#'   `conf.level`, and the printout's `header` and `footer` lines.
#' @examplesIf dpsynthr:::python_available()
#' d <- data.frame(x = rnorm(300))
#' d$y <- 1 + d$x + rnorm(300)
#' sch <- dp_schema(d, bounds = list(x = c(-4, 4), y = c(-5, 7)))
#' s <- dp_synthesize(d, "independent", epsilon = 1, m = 3, seed = 1, schema = sch)
#' dp_compare(dp_lm(y ~ x, data = s), d)
#' @export
dp_compare <- function(pooled, real_data) {
  need_fit(pooled, "pooled")
  need(real_data, "data.frame", "real_data", "a data.frame")
  family <- if (identical(pooled$model, "glm")) family_object(pooled$family)
  fit <- fit_one_dataset(pooled$model, pooled$formula, family, NULL, globalenv(), real_data)$fit
  if (inherits(fit, "error")) {
    stop("the model could not be fitted to the real data: ", conditionMessage(fit), call. = FALSE)
  }
  cf <- stats::coef(fit)
  out <- list(n_used = stats::nobs(fit), n_dropped = nrow(real_data) - stats::nobs(fit), rule = pooled$rule,
              m = pooled$m, model = model_label(pooled), conf.level = pooled$conf.level)
  # the real-data intervals, the comparison (differences, CI overlap) and its printout: the engine's
  cmp <- py_call(dp_bridge()$compare_for_r, r_to_pandas(pooled$pooled), as.list(names(cf)), as.list(unname(cf)),
                 as.list(unname(sqrt(diag(stats::vcov(fit)))[names(cf)])), m = out$m, rule = out$rule,
                 model = out$model, n_used = out$n_used, n_dropped = out$n_dropped, conf_level = out$conf.level,
                 family = family$family %||% "gaussian", df_resid = stats::df.residual(fit), what = "dp_compare")
  structure(c(cmp[c("table", "mean_abs_std_diff", "mean_ci_overlap")], out, cmp[c("header", "footer")]),
            class = "dpsynth_compare")
}

#' @export
format.dpsynth_compare <- function(x, digits = 3, ...) {
  tab <- x$table
  show <- data.frame(Synthetic = tab$estimate.syn, Observed = tab$estimate.obs, Diff = tab$diff,
                     `Std. coef diff` = tab$std.diff, `CI overlap` = tab$ci.overlap,
                     check.names = FALSE, row.names = tab$term)
  show[] <- lapply(show, function(v) round(v, digits))
  c(x$header, utils::capture.output(print(show)), x$footer)  # the lines around the table: the engine's
}

#' @export
print.dpsynth_compare <- function(x, ...) print_lines(x, ...)

# Pooled analyses: R's own lm/glm on each synthetic data set (dp_glm, dp_lm,
# or with() on a dpsynth_synds), pooled by the engine. R fits the models and
# collects each fit's coefficients and covariance matrix; the pooling policy
# (combining rules, screens of degenerate fits, notes and warnings) and the
# printout live once, in Python: dpsynth.inference and dpsynth.bridge.

#' Pool analyses of synthetic data sets (the engine's combining rules)
#'
#' `dp_pool()` takes either the fits of one model to each synthetic data set
#' (a mice `mira`, as returned by `with(<dpsynth_synds>, lm(...))`, or a list
#' of fitted models) or numbers the analyst computed (estimates and
#' variances), and combines them with the engine's rules. With q_i and u_i the
#' estimate and its variance from data set i, q-bar = mean(q_i),
#' u-bar = mean(u_i), b = var(q_i), the rules differ in the total variance t
#' and the degrees of freedom df:
#' \describe{
#'   \item{`"synthetic"`}{fully synthetic data (Raghunathan, Reiter & Rubin
#'     2003): t = (1 + 1/m) b - u-bar; where that is not positive, the
#'     non-negative fallback of Reiter (2002), (n_syn/n_orig) u-bar (column
#'     `fallback`). The default: a DP release is fully synthetic. Valid when
#'     each data set comes from its own posterior draw (`"napsu-mq"`); for a
#'     generator that draws all m sets from one noisy model the engine warns.}
#'   \item{`"mi"`}{multiple imputation (Rubin 1987; alias `"rubin1987"`):
#'     t = u-bar + (1 + 1/m) b with the Barnard-Rubin df, as `mice::pool()`.
#'     For multiply imputed real data, not for a synthetic release.}
#'   \item{`"reiter2003"`}{partially synthetic data: t = u-bar + b/m, as
#'     `mice::pool.syn()`. For releases that keep the original rows and
#'     replace some values, not for a DP release.}
#'   \item{`"two-stage"`, `"two-stage-synthetic"`}{M imputations with r
#'     syntheses each (Reiter 2004): pass `estimates` and `variances` as a
#'     list of M matrices (r rows each) or vectors (length r).}
#' }
#' The fits of a `mira` are screened as in [dp_glm()] (failed or
#' non-converged fits, aliased coefficients, exploded standard errors), by the
#' same engine code as Python's `fit_pooled`, so R and Python give the same
#' table on the same data sets. `mice::pool()` (rule `"rubin1987"`) and
#' `mice::pool.syn()` (rule `"reiter2003"`) also accept the `mira`.
#'
#' @param estimates A `mira` from `with(<dpsynth_synds>, ...)` (or
#'   [mice::as.mira()]), or a list of fitted `lm`/`glm` models; or the m
#'   estimates: a numeric vector (one term), a matrix with one row per data set
#'   and one column per term, or a list of m numeric vectors.
#' @param variances With numbers: the matching squared standard errors (same
#'   shape), or a list of m covariance matrices (only their diagonals enter
#'   the table). Not used with fits.
#' @param rule Combining rule (see Details).
#' @param dfcom Complete-data degrees of freedom (e.g. n - p) for the
#'   Barnard-Rubin df of rule `"mi"`; `NULL` = large sample for numbers, the
#'   residual df of the first usable fit for fits (as mice). Stored, not used,
#'   by the other rules (as in mice).
#' @param n_syn,n_orig Rows per synthetic data set and in the original data,
#'   for the fallback of the synthetic rules; both `NULL`: ratio 1. With fits
#'   only `n_orig` is given (n_syn = mean rows used per fit; default: the
#'   release's `n_private`).
#' @param terms Names of the terms (numbers only; default: the column names
#'   of `estimates`, or the names of its first element).
#' @param conf.level Level of `conf.low`, `conf.high`.
#' @param se_ratio,se_limit Screens for exploded standard errors of fits
#'   (see [dp_glm()]); `NULL` disables.
#' @return An object of class `dpsynth_pooled`; [summary()][summary.dpsynth_pooled]
#'   gives the pooled table as a data.frame.
#' @seealso [dp_glm()] to fit a model to every synthetic data set and pool it;
#'   [with.dpsynth_synds()] for mice's `with()`.
#' @examplesIf dpsynthr:::python_available()
#' q <- c(1, 1.2, 0.9, 1.1, 1.05)
#' u <- c(0.04, 0.05, 0.045, 0.05, 0.048)
#' p <- dp_pool(q, u, rule = "mi", dfcom = 98)
#' p
#' summary(p)[, c("estimate", "t", "df", "fmi")]
#' @export
dp_pool <- function(estimates, variances, rule = "synthetic", dfcom = NULL, n_syn = NULL,
                    n_orig = NULL, terms = NULL, conf.level = 0.95, se_ratio = 100, se_limit = NULL) {
  call <- match.call()
  if (!missing(estimates) && (inherits(estimates, "mira") || is_fit_list(estimates))) {
    if (!missing(variances)) stop("`variances` is not used with fitted models (their vcov() is)", call. = FALSE)
    fits <- if (inherits(estimates, "mira")) estimates$analyses else estimates
    return(pool_model_fits(fits, NULL, call, "dp_pool", estimates$dpsynth, rule, dfcom, n_orig, conf.level,
                           se_ratio, se_limit))
  }
  if (missing(estimates) || missing(variances)) {
    stop("dp_pool needs a mira (with(<dpsynth_synds>, lm(...))), a list of fitted models, or ",
         "`estimates` and `variances` (squared standard errors or covariance matrices)", call. = FALSE)
  }
  terms <- terms %||% default_terms(estimates)
  out <- py_call(dp_bridge()$pool_for_r, py_nested(estimates, "estimates"), py_nested(variances, "variances"),
                 rule = rule, dfcom = py_num_or_null(dfcom, "dfcom"), n_syn = py_num_or_null(n_syn, "n_syn"),
                 n_orig = py_num_or_null(n_orig, "n_orig"), terms = if (!is.null(terms)) as.list(as.character(terms)),
                 conf_level = as.numeric(conf.level), what = "dp_pool")
  new_pooled(out, call, conf.level, dfcom = dfcom)
}

is_fit_list <- function(x) {
  is.list(x) && !is.data.frame(x) && length(x) > 0L &&
    all(vapply(x, function(f) inherits(f, c("lm", "glm")), NA))
}

default_terms <- function(estimates) {
  if (is.matrix(estimates) || is.data.frame(estimates)) return(colnames(estimates))
  if (is.list(estimates) && length(estimates) && !is.list(estimates[[1]])) return(names(estimates[[1]]))
  NULL
}

# The engine's pooled result (table, rule, m, printout) -> dpsynth_pooled.
new_pooled <- function(out, call, conf.level, ...) {
  structure(list(pooled = out$table, call = call, rule = out$rule, rule_description = out$display$rule_description,
                 m = as.integer(out$m), conf.level = conf.level, ..., display = out$display),
            class = "dpsynth_pooled")
}

#' Fit a GLM or linear model to every synthetic data set and pool the results
#'
#' As `mice`'s `with(imp, glm(...))` followed by `pool()`, and synthpop's
#' `glm.synds()`: R's own [stats::glm()] (or [stats::lm()]) is fitted to each
#' of the m synthetic data sets, and each coefficient's estimates and squared
#' standard errors are combined with the engine's rule (see [dp_pool()]). The
#' individual fits are not stored, so the result is small and survives
#' `saveRDS()`.
#'
#' Degenerate fits are handled as the engine's `fit_pooled` does, and always
#' reported (`$dropped`, a warning, and the printout): a fit that fails or a
#' GLM that does not converge drops the data set; an aliased coefficient
#' (typically a category absent from one synthetic data set) or one whose
#' standard error is not finite, not positive or more than `se_ratio` times
#' the median over the data sets (or above `se_limit`) is dropped for that
#' data set. Each term is pooled over the data sets where it is valid (the
#' `m` column says how many); a term valid in fewer than 2 gets `NA`. The
#' engine's warnings are R warnings of class `dpsynth_degenerate_fit_warning`,
#' `dpsynth_not_noise_aware_warning` or `dpsynth_uncongenial_warning`.
#'
#' @param formula A model formula, e.g. `income ~ age + sex + race`.
#' @param family A family function, object or name, as for [stats::glm()].
#'   The default is `gaussian` (note: synthpop's `glm.synds` defaults to
#'   binomial). For a factor outcome, `binomial` models the probability of
#'   the second level, as `glm` does.
#' @param data A `dpsynth_synds` object from [dp_synthesize()] (or a list of
#'   data.frames).
#' @param rule Combining rule: `"synthetic"` (default, fully synthetic
#'   data), `"mi"` or `"reiter2003"` (see [dp_pool()]).
#' @param dfcom Complete-data df for rule `"mi"`; default: the residual df of
#'   the first usable fit (as mice).
#' @param n_orig Rows of the original data, for the fallback of the
#'   synthetic rule ((n_syn/n_orig) u-bar, n_syn = mean rows used per fit);
#'   `NULL`: the release's `n_private` when it has one, else u-bar.
#' @param conf.level Level of the confidence intervals.
#' @param se_ratio,se_limit Screens for exploded standard errors (see
#'   Details); `NULL` disables.
#' @param ... Further arguments to `glm()` / `lm()` (e.g. `weights`), evaluated
#'   in each synthetic data set.
#' @return An object of class `dpsynth_pooled`: a list with `pooled` (the
#'   pooled table), `call`, `formula`, `model` (`"glm"` or `"lm"`), `family`,
#'   `rule`, `m`, `conf.level`, `dfcom`, `nobs` (rows used per data set),
#'   `dropped` (data.frame of what was dropped and why), `notes` (warnings of
#'   the fits), `qhat` (m x p estimates) and `uhat` (list of m covariance
#'   matrices) for [dp_wald()], and the synthesis' `method` and `ledger`.
#'   `summary()` returns the pooled table as a data.frame.
#' @examplesIf dpsynthr:::python_available()
#' d <- data.frame(x = rnorm(200))
#' d$y <- factor(rbinom(200, 1, plogis(d$x)), labels = c("no", "yes"))
#' sch <- dp_schema(d, bounds = list(x = c(-4, 4)))
#' s <- dp_synthesize(d, "independent", epsilon = 1, m = 3, seed = 1, schema = sch)
#' fit <- dp_glm(y ~ x, family = binomial, data = s)
#' fit
#' summary(fit)
#' @importFrom stats gaussian
#' @export
dp_glm <- function(formula, family = gaussian, data, rule = "synthetic", dfcom = NULL,
                   n_orig = NULL, conf.level = 0.95, se_ratio = 100, se_limit = NULL, ...) {
  pool_fits(match.call(), formula, data, "glm", as_family(family, parent.frame()),
            match.call(expand.dots = FALSE)$..., parent.frame(), rule, dfcom, n_orig, conf.level, se_ratio, se_limit)
}

#' @rdname dp_glm
#' @export
dp_lm <- function(formula, data, rule = "synthetic", dfcom = NULL, n_orig = NULL,
                  conf.level = 0.95, se_ratio = 100, se_limit = NULL, ...) {
  pool_fits(match.call(), formula, data, "lm", NULL, match.call(expand.dots = FALSE)$..., parent.frame(), rule,
            dfcom, n_orig, conf.level, se_ratio, se_limit)
}

as_family <- function(family, env) {
  if (is.character(family)) family <- get(family, mode = "function", envir = env)
  if (is.function(family)) family <- family()
  if (!inherits(family, "family")) {
    stop("`family` must be a family function, object or name, e.g. binomial, binomial(\"probit\") ",
         "or \"binomial\"", call. = FALSE)
  }
  family
}

# What is stored: name and link (rebuilt from stats), or the object itself
# for a family stats does not have.
family_spec <- function(fam) {
  if (is.null(fam)) return(NULL)
  f <- get0(fam$family, envir = asNamespace("stats"), mode = "function")
  if (!is.null(f) && identical(tryCatch(f(link = fam$link)$family, error = function(e) NULL), fam$family)) {
    return(list(family = fam$family, link = fam$link))
  }
  list(family = fam$family, link = fam$link, object = fam)
}

family_object <- function(spec) {
  if (!is.null(spec$object)) return(spec$object)
  get(spec$family, envir = asNamespace("stats"), mode = "function")(link = spec$link)
}

synthetic_frames <- function(data) {
  if (inherits(data, "dpsynth_synds")) return(data$syn)
  if (is.list(data) && !is.data.frame(data) && length(data) && all(vapply(data, is.data.frame, NA))) return(data)
  stop("`data` must be the dpsynth_synds object from dp_synthesize() or a list of m data.frames",
       if (is.data.frame(data)) ", not one data.frame", call. = FALSE)
}

# Fit one model to one data set; returns the fit (or the error) and the
# warnings it raised.
fit_one_dataset <- function(model, formula, family, extra, env, d) {
  fn <- if (model == "glm") quote(stats::glm) else quote(stats::lm)
  args <- c(list(formula = formula), if (model == "glm") list(family = quote(.dp_family)),
            list(data = quote(.dp_data)), as.list(extra))
  where <- list2env(list(.dp_data = d, .dp_family = family), parent = env)
  notes <- character()
  fit <- tryCatch(
    withCallingHandlers(eval(as.call(c(fn, args)), where),
                        warning = function(w) {
                          notes <<- c(notes, conditionMessage(w))
                          invokeRestart("muffleWarning")
                        }),
    error = function(e) e)
  list(fit = fit, notes = unique(notes))
}

# dp_glm / dp_lm: R's model on every data set (the `...` of the call reach each fit), then the engine.
pool_fits <- function(call, formula, data, model, family, extra, env, rule, dfcom, n_orig, conf.level, se_ratio,
                      se_limit) {
  if (is.character(formula)) formula <- stats::as.formula(formula, env = env)
  if (!inherits(formula, "formula")) stop("`formula` must be a formula, e.g. y ~ x", call. = FALSE)
  frames <- synthetic_frames(data)
  if (length(frames) < 2L) {
    stop("pooling needs at least 2 synthetic data sets (m >= 2); synthesise with m = 2 or more", call. = FALSE)
  }
  fits <- lapply(frames, function(d) fit_one_dataset(model, formula, family, extra, env, d))
  pool_model_fits(lapply(fits, `[[`, "fit"), lapply(fits, `[[`, "notes"), call, paste0("dp_", model),
                  synds_info(data), rule, dfcom, n_orig, conf.level, se_ratio, se_limit, formula, model, family)
}

# One fit -> the engine's record of it: coefficients (NA = aliased), the covariance of the estimable
# ones, rows used and dropped, residual df and the fit's warnings, or why the fit is unusable.
fit_record <- function(f, notes = NULL) {
  if (inherits(f, "error")) return(list(error = paste("the fit failed:", conditionMessage(f))))
  if (!inherits(f, c("lm", "glm"))) return(list(error = "not an lm or glm fit"))
  if (inherits(f, "glm") && !isTRUE(f$converged)) return(list(error = "the GLM did not converge"))
  cf <- stats::coef(f)
  ok <- names(cf)[!is.na(cf)]
  list(coef = as.list(cf), vcov = py_nested(stats::vcov(f)[ok, ok, drop = FALSE]), nobs = stats::nobs(f),
       df_resid = stats::df.residual(f), n_missing = length(f$na.action), notes = as.list(notes))
}

# R's fits -> dpsynth_pooled. The pooling policy (congeniality check, screens, rules, notes,
# warnings) is the engine's: dpsynth.bridge.pool_fits_for_r. Without `formula` (a mira), the model
# is that of the first lm/glm fit.
pool_model_fits <- function(fits, notes, call, what, synds, rule, dfcom, n_orig, conf.level, se_ratio, se_limit,
                            formula = NULL, model = NULL, family = NULL) {
  if (is.null(formula)) {
    first <- Find(function(f) inherits(f, c("lm", "glm")), fits)
    if (is.null(first)) stop("the mira holds no lm or glm fits; dp_pool pools lm() and glm() fits", call. = FALSE)
    formula <- stats::formula(first)
    model <- if (inherits(first, "glm")) "glm" else "lm"
    if (model == "glm") family <- stats::family(first)
  }
  environment(formula) <- globalenv()
  family <- family_spec(family)
  n_orig <- n_orig %||% synds$n_private  # NAPSU-MQ's data sets are larger than the private table
  out <- py_call(dp_bridge()$pool_fits_for_r, Map(fit_record, fits, notes %||% list(NULL)), rule = rule,
                 dfcom = py_num_or_null(dfcom, "dfcom"), n_orig = py_num_or_null(n_orig, "n_orig"),
                 conf_level = as.numeric(conf.level), se_ratio = se_ratio, se_limit = se_limit,
                 formula = formula_string(formula),
                 family = model_label(list(formula = formula, model = model, family = family)),
                 columns = as.list(synds$columns), queries = if (!is.null(synds$queries)) lapply(synds$queries, as.list),
                 noise_aware = synds$noise_aware, method = synds$method,
                 epsilon = attr(synds$ledger, "total_epsilon"), what = what)
  terms <- out$terms
  matrices <- function(u) if (!is.null(u)) matrix(unlist(u), length(terms), byrow = TRUE, dimnames = list(terms, terms))
  new_pooled(out, call, conf.level, dfcom = out$dfcom, formula = formula, model = model, family = family,
             nobs = as.numeric(out$nobs), n_orig = n_orig, dropped = out$dropped,
             notes = unique(unlist(notes)), congeniality = as.character(out$congeniality),
             qhat = matrix(as.numeric(unlist(out$qhat)), ncol = length(terms), byrow = TRUE, dimnames = list(NULL, terms)),
             uhat = lapply(out$uhat, matrices), method = synds$method, ledger = synds$ledger)
}

# ---- methods -----------------------------------------------------------------------------

#' Pooled table of a `dpsynth_pooled` object
#'
#' @param object A `dpsynth_pooled` object from [dp_glm()], [dp_lm()] or
#'   [dp_pool()].
#' @param exponentiate If `TRUE`, `estimate`, `conf.low` and `conf.high` are
#'   exponentiated (odds ratios for a logistic model), as in mice.
#' @param ... Not used.
#' @return A data.frame, one row per term, with columns `term, estimate,
#'   std.error, statistic, df, p.value, conf.low, conf.high, ubar, b, t, riv,
#'   lambda, fmi, rule, m` (mice's names; `lambda` and `fmi` are defined only
#'   for rule `"mi"`, `NA` otherwise) and `dfcom, fallback` (`TRUE` where the
#'   synthetic rule's variance was not positive and the fallback was used).
#'   The p-values and intervals use a t reference with `df` degrees of
#'   freedom.
#' @export
summary.dpsynth_pooled <- function(object, exponentiate = FALSE, ...) {
  out <- object$pooled  # in this order from the engine (dpsynth.bridge)
  ci <- c("estimate", "conf.low", "conf.high")
  if (isTRUE(exponentiate)) out[ci] <- lapply(out[ci], exp)
  out
}

#' @export
as.data.frame.dpsynth_pooled <- function(x, row.names = NULL, optional = FALSE, ...) {
  summary.dpsynth_pooled(x, ...)
}

#' @export
coef.dpsynth_pooled <- function(object, ...) stats::setNames(object$pooled$estimate, object$pooled$term)

#' @export
confint.dpsynth_pooled <- function(object, parm, level = object$conf.level, ...) {
  if (!isTRUE(all.equal(level, object$conf.level))) {
    stop(sprintf("the pooled intervals were computed at level %s; refit with conf.level = %s",
                 format(object$conf.level), format(level)), call. = FALSE)
  }
  tab <- object$pooled
  ci <- cbind(tab$conf.low, tab$conf.high)
  pct <- paste(format(100 * c((1 - level) / 2, (1 + level) / 2), trim = TRUE, digits = 3), "%")
  dimnames(ci) <- list(tab$term, pct)
  if (!missing(parm)) ci <- ci[parm, , drop = FALSE]
  ci
}

model_label <- function(x) {
  if (is.null(x$formula)) return(NULL)
  f <- paste(deparse(x$formula, width.cutoff = 500L), collapse = " ")
  if (identical(x$model, "lm")) return(sprintf("lm(%s)", f))
  sprintf("glm(%s, family = %s(%s))", f, x$family$family, x$family$link)
}

#' @export
format.dpsynth_pooled <- function(x, digits = 4, ...) {
  # the header, the columns shown and the notes are the engine's (dpsynth.bridge.pooled_display)
  tab <- x$pooled
  body <- tab[x$display$columns]
  num <- vapply(body, is.double, NA)
  body[num] <- lapply(body[num], function(v) signif(v, digits))
  if (any(tab$fallback %in% TRUE)) body$fallback <- ifelse(tab$fallback, "*", "")
  dropped <- x$dropped
  c(x$display$header, "", utils::capture.output(print(body, row.names = FALSE)), x$display$footer,
    if (NROW(dropped)) c(sprintf("Dropped before pooling (%d): see $dropped", nrow(dropped)),
                         utils::capture.output(print(utils::head(dropped, 5L), row.names = FALSE))))
}

#' @export
print.dpsynth_pooled <- function(x, ...) print_lines(x, ...)

#' Coefficient plot of a pooled fit
#'
#' Base graphics: each coefficient's pooled estimate with its confidence
#' interval; with `compare`, the real-data estimate and interval beside it.
#'
#' @param x A `dpsynth_pooled` object.
#' @param compare Optional `dpsynth_compare` object from [dp_compare()].
#' @param intercept Include the intercept?
#' @param main Plot title.
#' @param ... Passed to [graphics::plot()].
#' @return `x`, invisibly.
#' @export
plot.dpsynth_pooled <- function(x, compare = NULL, intercept = FALSE, main = NULL, ...) {
  # the terms shown, the interval ends clipped to the axis and the axis: dpsynth.bridge.coef_plot
  lay <- py_call(dp_bridge()$coef_plot, r_to_pandas(x$pooled), if (!is.null(compare)) r_to_pandas(compare$table),
                 intercept = isTRUE(intercept), what = "plot")
  k <- length(lay$terms)
  if (!k) {
    graphics::plot.new()
    graphics::title(main = "no coefficients to plot")
    return(invisible(x))
  }
  y <- rev(seq_len(k))
  obs <- lay$obs
  old <- graphics::par(mar = c(4, max(4, 0.5 * max(nchar(lay$terms))), 3, 1))
  on.exit(graphics::par(old))
  graphics::plot(lay$estimate, y, xlim = lay$xlim, ylim = c(0.5, k + if (is.null(obs)) 0.5 else 1.2),
                 yaxt = "n", pch = 19,
                 xlab = sprintf("estimate and %s%% interval", format(100 * x$conf.level)), ylab = "",
                 main = main %||% sprintf("Pooled over m = %d (rule %s)", x$m, x$rule), ...)
  graphics::segments(lay$lo, y, lay$hi, y, lwd = 2)
  for (clip in list(list(lay$clip_lo, lay$lo), list(lay$clip_hi, lay$hi))) {
    if (any(clip[[1]])) graphics::arrows(lay$estimate[clip[[1]]], y[clip[[1]]], clip[[2]][clip[[1]]], y[clip[[1]]],
                                         length = 0.08, lwd = 2)
  }
  if (!is.null(obs)) {
    graphics::points(obs$estimate.obs, y - 0.2, pch = 1, col = "firebrick")
    graphics::segments(obs$conf.low.obs, y - 0.2, obs$conf.high.obs, y - 0.2, col = "firebrick")
    graphics::legend("top", c("synthetic (pooled)", "real data"), pch = c(19, 1), horiz = TRUE,
                     col = c("black", "firebrick"), bty = "n", cex = 0.8)
  }
  if (any(lay$clip_lo | lay$clip_hi)) {
    graphics::mtext("arrows: interval continues beyond the plot", side = 3, line = 0.2, cex = 0.7)
  }
  graphics::abline(v = 0, lty = 3)
  graphics::axis(2, at = y, labels = lay$terms, las = 1, cex.axis = 0.8)
  invisible(x)
}

#' Joint Wald test (D1) of several coefficients of a pooled fit
#'
#' The engine's `wald_test` (Li, Raghunathan & Rubin 1991 for rule `"mi"`,
#' with the Reiter 2007 small-sample df; the analogues for the synthetic-data
#' rules) on the per-data-set estimates and full covariance matrices kept by
#' [dp_glm()], over the data sets valid (after the screens) for every
#' estimated term, as the engine's `PooledResult.wald_test`.
#'
#' @param x A `dpsynth_pooled` object from [dp_glm()] or [dp_lm()].
#' @param terms Terms to test jointly (default: all but the intercept). A
#'   single string is also matched as a prefix of term names, so `"race"`
#'   tests all `race` dummies.
#' @param null Values under the null hypothesis (default 0).
#' @return A one-row data.frame with `statistic, df1, df2, p.value, riv,
#'   rule, m, fallback`.
#' @examplesIf dpsynthr:::python_available()
#' d <- data.frame(g = factor(sample(c("a", "b", "c"), 300, TRUE)), x = rnorm(300))
#' d$y <- d$x + rnorm(300)
#' sch <- dp_schema(d, bounds = list(x = c(-4, 4), y = c(-6, 6)), bins = 8)
#' s <- dp_synthesize(d, "independent", epsilon = 2, m = 4, seed = 2, schema = sch)
#' dp_wald(dp_lm(y ~ g + x, data = s), "g")
#' @export
dp_wald <- function(x, terms = NULL, null = NULL) {
  need_fit(x, "x")
  # term selection, the data sets valid for every term, the test: dpsynth.inference.wald_per_dataset
  uhat <- lapply(x$uhat, function(u) if (!is.null(u)) py_nested(u))
  res <- py_call(dp_py()$inference$wald_per_dataset, py_nested(x$qhat), uhat, as.list(colnames(x$qhat)),
                 rule = x$rule, terms = terms,
                 null = if (!is.null(null)) as.list(as.numeric(null)), dfcom = py_num_or_null(x$dfcom, "dfcom"),
                 nobs = as.list(x$nobs), n_orig = py_num_or_null(x$n_orig, "n_orig"), what = "dp_wald")
  as.data.frame(res, stringsAsFactors = FALSE)
}

# Pooled analyses: R's own lm/glm on each synthetic data set (dp_glm, dp_lm,
# or with() on a dpsynth_synds), pooled by the engine. R fits the models and
# collects each fit's coefficients and covariance matrix; the pooling policy
# (combining rules, screens of degenerate fits, notes and warnings) and the
# printout live once, in Python: dpsynth.inference and dpsynth.bridge.

# dp_pool(): documented in man/dp_pool.Rd
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

# dp_glm(): documented in man/dp_glm.Rd
dp_glm <- function(formula, family = gaussian, data, rule = "synthetic", dfcom = NULL,
                   n_orig = NULL, conf.level = 0.95, se_ratio = 100, se_limit = NULL, ...) {
  pool_fits(match.call(), formula, data, "glm", as_family(family, parent.frame()),
            match.call(expand.dots = FALSE)$..., parent.frame(), rule, dfcom, n_orig, conf.level, se_ratio, se_limit)
}

# dp_lm(): documented in man/dp_glm.Rd
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

# summary.dpsynth_pooled(): documented in man/summary.dpsynth_pooled.Rd
summary.dpsynth_pooled <- function(object, exponentiate = FALSE, ...) {
  out <- object$pooled  # in this order from the engine (dpsynth.bridge)
  ci <- c("estimate", "conf.low", "conf.high")
  if (isTRUE(exponentiate)) out[ci] <- lapply(out[ci], exp)
  out
}

as.data.frame.dpsynth_pooled <- function(x, row.names = NULL, optional = FALSE, ...) {
  summary.dpsynth_pooled(x, ...)
}

coef.dpsynth_pooled <- function(object, ...) stats::setNames(object$pooled$estimate, object$pooled$term)

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

print.dpsynth_pooled <- function(x, ...) print_lines(x, ...)

# plot.dpsynth_pooled(): documented in man/plot.dpsynth_pooled.Rd
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

# dp_wald(): documented in man/dp_wald.Rd
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

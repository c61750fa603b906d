# Pooled analyses: R's own lm/glm on each synthetic data set (dp_glm, dp_lm,
# or with() on a dpsynth_synds), pooled by the engine. R fits the models and
# collects each fit's coefficients and covariance matrix; the pooling policy
# (combining rules, screens of degenerate fits, notes and warnings) lives once,
# in Python: dpsynth.inference.pool_fits and dpsynth.pool.

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
    return(pool_mira(estimates, call, rule = rule, dfcom = dfcom, n_orig = n_orig,
                     conf.level = conf.level, se_ratio = se_ratio, se_limit = se_limit))
  }
  if (missing(estimates) || missing(variances)) {
    stop("dp_pool needs a mira (with(<dpsynth_synds>, lm(...))), a list of fitted models, or ",
         "`estimates` and `variances` (squared standard errors or covariance matrices)", call. = FALSE)
  }
  terms <- terms %||% default_terms(estimates)
  table <- pool_table(py_nested(estimates, "estimates"), py_nested(variances, "variances"),
                      rule = rule, dfcom = dfcom, n_syn = n_syn, n_orig = n_orig, terms = terms,
                      conf.level = conf.level)
  new_pooled(table, call = call, rule = table$rule[[1]], m = max(table$m),
             conf.level = conf.level, dfcom = dfcom)
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

# One call of dpsynth.pool -> R data.frame (mice's column names).
pool_table <- function(q, u, rule, dfcom = NULL, n_syn = NULL, n_orig = NULL, terms = NULL,
                       conf.level = 0.95) {
  if (!is.character(rule) || length(rule) != 1L) stop("`rule` must be one string", call. = FALSE)
  res <- py_try(dp_py()$pool(q, u, rule = rule, dfcom = py_num_or_null(dfcom, "dfcom"),
                             n_syn = py_num_or_null(n_syn, "n_syn"),
                             n_orig = py_num_or_null(n_orig, "n_orig"),
                             terms = if (!is.null(terms)) as.list(as.character(terms)),
                             conf_level = as.numeric(conf.level)),
                "dp_pool")
  pandas_to_r(res)
}

# The canonical rule name and its description, from the engine.
rule_info <- function(rule) {
  rules <- reticulate::import("dpsynth.inference.rules", convert = FALSE)
  name <- py_try(reticulate::py_to_r(rules$check_rule(rule)), "rule")
  list(name = name, description = reticulate::py_to_r(rules$RULES)[[name]])
}

new_pooled <- function(table, call, rule, m, conf.level, dfcom = NULL, ...) {
  info <- tryCatch(rule_info(rule), error = function(e) list(name = rule, description = NA_character_))
  structure(list(pooled = table, call = call, rule = info$name, rule_description = info$description,
                 m = as.integer(m), conf.level = conf.level, dfcom = dfcom, ...),
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
#' `m` column says how many); a term valid in fewer than 2 gets `NA`.
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
#' sch <- list(x = list(type = "numeric", lower = -4, upper = 4, bins = 16),
#'             y = list(type = "categorical", categories = c("no", "yes")))
#' s <- dp_synthesize(d, "independent", epsilon = 1, m = 3, seed = 1, schema = sch)
#' fit <- dp_glm(y ~ x, family = binomial, data = s)
#' fit
#' summary(fit)
#' @importFrom stats gaussian
#' @export
dp_glm <- function(formula, family = gaussian, data, rule = "synthetic", dfcom = NULL,
                   n_orig = NULL, conf.level = 0.95, se_ratio = 100, se_limit = NULL, ...) {
  call <- match.call()
  fam <- as_family(family, parent.frame())
  extra <- match.call(expand.dots = FALSE)$...
  pool_fits(call, formula, data, model = "glm", family = fam, extra = extra, env = parent.frame(),
            rule = rule, dfcom = dfcom, n_orig = n_orig, conf.level = conf.level,
            se_ratio = se_ratio, se_limit = se_limit)
}

#' @rdname dp_glm
#' @export
dp_lm <- function(formula, data, rule = "synthetic", dfcom = NULL, n_orig = NULL,
                  conf.level = 0.95, se_ratio = 100, se_limit = NULL, ...) {
  call <- match.call()
  extra <- match.call(expand.dots = FALSE)$...
  pool_fits(call, formula, data, model = "lm", family = NULL, extra = extra, env = parent.frame(),
            rule = rule, dfcom = dfcom, n_orig = n_orig, conf.level = conf.level,
            se_ratio = se_ratio, se_limit = se_limit)
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
  if (is.data.frame(data)) {
    stop("`data` is one data.frame; pass the dpsynth_synds object from dp_synthesize() ",
         "(or a list of m data.frames)", call. = FALSE)
  }
  if (is.list(data) && length(data) && all(vapply(data, is.data.frame, NA))) return(data)
  stop("`data` must be a dpsynth_synds object from dp_synthesize() or a list of data.frames",
       call. = FALSE)
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

# The engine's congeniality check: what `formula` estimates that the synthesis' released
# marginal tables (data$queries) do not carry. Empty when nothing is missing or the queries
# are unknown (a list of data.frames, or a generator that does not report them).
congeniality_messages <- function(formula, columns, queries) {
  if (is.null(queries)) return(character())
  f <- if (inherits(formula, "formula")) formula_string(formula) else formula
  msgs <- py_try(dp_py()$analyses$congeniality_messages(f, as.list(columns), lapply(queries, as.list)), "congeniality")
  as.character(unlist(reticulate::py_to_r(msgs)))
}

# Warn (class dpsynth_uncongenial_warning) when the synthesis cannot carry the model; returns the messages.
check_congeniality <- function(formula, data, columns) {
  if (!inherits(data, "dpsynth_synds") || is.null(data$queries)) return(character())
  msgs <- congeniality_messages(formula, columns, data$queries)
  if (length(msgs)) {
    f <- formula_string(formula)
    remedy <- sprintf("dp_synthesize(..., method = \"napsu-mq\", analyses = list(%s))", f)
    text <- reticulate::py_to_r(dp_py()$analyses$uncongenial_text(f, as.list(msgs), remedy))
    warning(structure(class = c("dpsynth_uncongenial_warning", "warning", "condition"),
                      list(message = text, call = NULL, missing = msgs)))
  }
  msgs
}

pool_fits <- function(call, formula, data, model, family, extra, env, rule, dfcom, n_orig,
                      conf.level, se_ratio, se_limit) {
  if (is.character(formula)) formula <- stats::as.formula(formula, env = env)
  if (!inherits(formula, "formula")) stop("`formula` must be a formula, e.g. y ~ x", call. = FALSE)
  frames <- synthetic_frames(data)
  if (length(frames) < 2L) {
    stop("pooling needs at least 2 synthetic data sets (m >= 2); synthesise with m = 2 or more", call. = FALSE)
  }
  columns <- names(frames[[1]])
  fits <- lapply(frames, function(d) fit_one_dataset(model, formula, family, extra, env, d))
  environment(formula) <- globalenv()
  pool_model_fits(lapply(fits, `[[`, "fit"), lapply(fits, `[[`, "notes"), call, rule, dfcom, n_orig, conf.level,
                  se_ratio, se_limit, formula, model, family, if (inherits(data, "dpsynth_synds")) data,
                  columns, paste0("dp_", model))
}

# A mira (or a list of fits) -> dpsynth_pooled, through the engine's pool_fits.
pool_mira <- function(object, call, rule, dfcom, n_orig, conf.level, se_ratio, se_limit) {
  fits <- if (inherits(object, "mira")) object$analyses else object
  first <- Find(function(f) inherits(f, c("lm", "glm")), fits)
  if (is.null(first)) stop("the mira holds no lm or glm fits; dp_pool pools lm() and glm() fits", call. = FALSE)
  formula <- stats::formula(first)
  environment(formula) <- globalenv()
  model <- if (inherits(first, "glm")) "glm" else "lm"
  pool_model_fits(fits, lapply(fits, function(f) character()), call, rule, dfcom, n_orig, conf.level, se_ratio,
                  se_limit, formula, model, if (model == "glm") stats::family(first), object$dpsynth,
                  object$dpsynth$columns, "dp_pool")
}

# One fit -> what the engine needs: coefficients (NA = aliased), the covariance of the
# estimable ones, rows used and dropped, residual df, or why the fit is unusable.
fit_pieces <- function(f) {
  if (inherits(f, "error")) return(list(error = paste("the fit failed:", conditionMessage(f))))
  if (!inherits(f, c("lm", "glm"))) return(list(error = "not an lm or glm fit"))
  if (inherits(f, "glm") && !isTRUE(f$converged)) return(list(error = "the GLM did not converge"))
  cf <- stats::coef(f)
  ok <- names(cf)[!is.na(cf)]
  v <- stats::vcov(f)[ok, ok, drop = FALSE]
  list(error = NULL, coef = cf, vcov = v, nobs = stats::nobs(f), df = stats::df.residual(f),
       n_missing = length(f$na.action))
}

pool_model_fits <- function(fits, notes, call, rule, dfcom, n_orig, conf.level, se_ratio, se_limit,
                            formula, model, family, synds, columns, what) {
  n_orig <- n_orig %||% synds$n_private  # NAPSU-MQ's data sets are larger than the private table
  congeniality <- if (!is.null(synds$queries)) {
    check_congeniality(formula, structure(list(queries = synds$queries), class = "dpsynth_synds"), columns)
  } else character()
  pieces <- lapply(fits, fit_pieces)
  bad <- vapply(pieces, function(p) !is.null(p$error), NA)
  terms <- unique(unlist(lapply(pieces[!bad], function(p) names(p$coef))))
  m <- length(fits)
  est <- matrix(NA_real_, m, length(terms), dimnames = list(NULL, terms))
  uhat <- vector("list", m)
  for (i in which(!bad)) {
    est[i, names(pieces[[i]]$coef)] <- pieces[[i]]$coef
    uhat[[i]] <- matrix(NA_real_, length(terms), length(terms), dimnames = list(terms, terms))
    v <- pieces[[i]]$vcov
    uhat[[i]][rownames(v), colnames(v)] <- v
  }
  num <- function(name, default = NA_real_) lapply(pieces, function(p) p[[name]] %||% default)
  inf <- dp_py()$inference
  out <- py_try(dp_bridge()$call_quietly(
    inf$pool_fits,
    lapply(pieces, function(p) if (is.null(p$error)) as.list(p$coef)),
    lapply(pieces, function(p) if (is.null(p$error)) py_nested(p$vcov)),
    rule = rule, nobs = num("nobs", 0), df_resid = num("df"), n_missing = num("n_missing", 0),
    errors = lapply(pieces, `[[`, "error"), notes = lapply(notes, as.list),
    dfcom = py_num_or_null(dfcom, "dfcom"), n_orig = py_num_or_null(n_orig, "n_orig"),
    conf_level = as.numeric(conf.level), se_ratio = se_ratio, se_limit = se_limit,
    formula = formula_string(formula), family = model_label(list(formula = formula, model = model,
                                                                   family = family_spec(family))),
    noise_aware = synds$noise_aware, method = synds$method, congeniality = as.list(congeniality)),
    what)
  res <- py_item(out, 0L)
  relay_warnings(reticulate::py_to_r(py_item(out, 1L)), what)
  table <- pandas_to_r(res$to_frame())
  dropped <- dropped_to_r(res$dropped)
  for (k in seq_len(nrow(dropped))) {  # the screens' verdicts, for dp_wald
    est[dropped$dataset[k], if (is.na(dropped$term[k])) seq_along(terms) else dropped$term[k]] <- NA_real_
  }
  notes_engine <- as.character(unlist(reticulate::py_to_r(res$notes())))
  nobs <- vapply(pieces, function(p) as.numeric(p$nobs %||% NA_real_), 0)
  new_pooled(table, call = call, rule = table$rule[[1]], m = m, conf.level = conf.level,
             dfcom = table$dfcom[[1]], formula = formula, model = model, family = family_spec(family),
             nobs = nobs, n_orig = n_orig, dropped = dropped,
             notes = unique(unlist(notes)), engine_notes = notes_engine,
             congeniality = congeniality, qhat = est, uhat = uhat,
             method = synds$method, ledger = synds$ledger)
}

# The engine's dropped table (0-based dataset index) -> R (1-based).
dropped_to_r <- function(pdf) {
  d <- pandas_to_r(pdf)
  data.frame(dataset = as.integer(d$dataset) + rep(1L, nrow(d)), term = as.character(d$term),
             reason = as.character(d$reason), stringsAsFactors = FALSE)
}

# The engine's Python warnings (class name, message) -> R warnings, worded for R.
relay_warnings <- function(msgs, what) {
  for (w in msgs) {
    msg <- sub("dataset\\(s\\)", "data set(s)", sub("^fit_pooled:", paste0(what, ":"), w[[2]]))
    warning(gsub("see \\.dropped", "see $dropped", msg), call. = FALSE)
  }
}

#' Fit a model to every synthetic data set, mice style
#'
#' `with(res, lm(wgt ~ age + reg))` evaluates the expression in each of the m
#' synthetic data sets of `res` (as `with()` on a mice `mids`) and returns a
#' mice `mira`: pool it with [dp_pool()] (the rule for fully synthetic data,
#' the default for a DP release), or with `mice::pool()` (Rubin's rules for
#' multiply imputed data) or `mice::pool.syn()` (partially synthetic data),
#' which do not fit a fully synthetic release but are there for comparison.
#'
#' @param data A `dpsynth_synds` object from [dp_synthesize()].
#' @param expr An expression, typically a model call such as `lm(y ~ x)`,
#'   evaluated with the columns of each synthetic data set in scope.
#' @param ... Not used.
#' @return An object of class `c("dpsynth_mira", "mira", "matrix")`, as
#'   `mice::as.mira()` makes: `call`, `call1` (the synthesis call), `nmis`
#'   (`NULL`), `analyses` (the m results), and `dpsynth` (method, ledger,
#'   whether the generator is noise-aware, released marginal tables) so that
#'   [dp_pool()] can warn where the rule does not apply.
#' @examplesIf dpsynthr:::python_available()
#' d <- data.frame(x = rnorm(200))
#' d$y <- 1 + d$x + rnorm(200)
#' sch <- dp_schema(d, bounds = list(x = c(-4, 4), y = c(-4, 6)))
#' s <- dp_synthesize(d, "independent", epsilon = 1, m = 3, seed = 1, schema = sch)
#' fit <- with(s, lm(y ~ x))
#' dp_pool(fit)
#' @export
with.dpsynth_synds <- function(data, expr, ...) {
  call <- match.call()
  expr <- substitute(expr)
  env <- parent.frame()
  analyses <- lapply(data$syn, function(d) eval(expr, d, env))
  structure(list(call = call, call1 = data$call, nmis = NULL, analyses = analyses,
                 dpsynth = list(method = data$method, m = data$m, ledger = data$ledger,
                                noise_aware = data$noise_aware, queries = data$queries,
                                n_private = data$n_private,
                                columns = if (length(data$syn)) names(data$syn[[1]]))),
            class = c("dpsynth_mira", "mira", "matrix"))
}

#' @export
print.dpsynth_mira <- function(x, ...) {
  cat("Class: mira (from with() on a dpsynth_synds)    m = ", length(x$analyses), "\n", sep = "")
  cat("Call: ", paste(deparse(x$call), collapse = " "), "\n", sep = "")
  cat("Synthesis: ", x$dpsynth$method %||% "?", "\n", sep = "")
  cat("Pool with dp_pool() (fully synthetic data; mice::pool.syn() and mice::pool() also accept it)\n")
  invisible(x)
}

# ---- methods -----------------------------------------------------------------------------

summary_columns <- c("term", "estimate", "std.error", "statistic", "df", "p.value", "conf.low",
                     "conf.high", "ubar", "b", "t", "riv", "lambda", "fmi", "rule", "m", "dfcom",
                     "fallback")

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
  tab <- object$pooled
  out <- tab[intersect(summary_columns, names(tab))]
  extra <- setdiff(names(tab), summary_columns)
  if (length(extra)) out <- cbind(out, tab[extra])
  if (isTRUE(exponentiate)) {
    for (col in c("estimate", "conf.low", "conf.high")) out[[col]] <- exp(out[[col]])
  }
  rownames(out) <- NULL
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
  tab <- x$pooled
  head <- c(sprintf("Class: dpsynth_pooled    m = %d    rule = %s", x$m, x$rule),
            if (!is.na(x$rule_description %||% NA)) paste0("  (", x$rule_description, ")"))
  fit <- model_label(x)
  if (!is.null(fit)) head <- c(head, sprintf("Model: %s, fitted to each synthetic data set", fit))
  if (!is.null(x$method)) {
    spent <- attr(x$ledger, "total_epsilon")
    head <- c(head, sprintf("Synthesis: %s%s", x$method,
                            if (!is.null(spent)) sprintf(", epsilon spent = %s (dp_ledger())", format(spent)) else ""))
  }
  target <- switch(x$rule,
    synthetic = "population quantities from fully synthetic data (synthesis and DP noise included)",
    mi = "population quantities from multiply imputed data",
    reiter2003 = "population quantities from partially synthetic data",
    "population quantities")
  head <- c(head, sprintf("Inference: %s; t reference with df per term, %s%% intervals", target,
                          format(100 * x$conf.level)))
  show <- intersect(c("term", "estimate", "std.error", "statistic", "df", "p.value", "conf.low",
                      "conf.high", "riv", "fmi", "m"), names(tab))
  if (x$rule != "mi") show <- setdiff(show, "fmi")
  body <- tab[show]
  num <- vapply(body, is.double, NA)
  body[num] <- lapply(body[num], function(v) signif(v, digits))
  if (any(tab$fallback %in% TRUE)) body$fallback <- ifelse(tab$fallback, "*", "")
  lines <- c(head, "", utils::capture.output(print(body, row.names = FALSE)))
  if (x$rule != "mi") lines <- c(lines, "fmi (fraction of missing information) is defined for rule 'mi' only.")
  # the engine's notes (fallback, small df, fit warnings, uncongeniality, drops): one policy, in Python
  notes <- x$engine_notes
  if (is.null(notes) && any(tab$fallback %in% TRUE)) {
    notes <- "* t = (1 + 1/m) b - ubar was not positive: fallback variance (Reiter 2002) used."
  }
  lines <- c(lines, notes)
  dropped <- x$dropped
  if (!is.null(dropped) && nrow(dropped)) {
    lines <- c(lines, sprintf("Dropped before pooling (%d): see $dropped", nrow(dropped)),
               utils::capture.output(print(utils::head(dropped, 5L), row.names = FALSE)))
  }
  lines
}

#' @export
print.dpsynth_pooled <- function(x, ...) {
  writeLines(format(x, ...))
  invisible(x)
}

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
  tab <- x$pooled
  keep <- if (intercept) rep(TRUE, nrow(tab)) else tab$term != "(Intercept)"
  tab <- tab[keep & !is.na(tab$estimate), , drop = FALSE]
  if (!nrow(tab)) {
    graphics::plot.new()
    graphics::title(main = "no coefficients to plot")
    return(invisible(x))
  }
  k <- nrow(tab)
  y <- rev(seq_len(k))
  obs <- NULL
  if (!is.null(compare)) obs <- compare$table[match(tab$term, compare$table$term), , drop = FALSE]
  # Axis: the estimates and the real-data intervals, and the pooled intervals unless they are far
  # wider than the rest (tiny df can give intervals of 1e50): those are clipped, with an arrow.
  core <- c(tab$estimate, obs$estimate.obs, obs$conf.low.obs, obs$conf.high.obs)
  widths <- c(tab$conf.high - tab$conf.low, obs$conf.high.obs - obs$conf.low.obs)
  widths <- widths[is.finite(widths)]
  reach <- max(2 * diff(range(core, finite = TRUE)),
               if (length(widths)) stats::quantile(widths, 0.25, names = FALSE), 1e-8)
  lim <- range(core, finite = TRUE) + c(-1, 1) * reach
  lo <- pmax(tab$conf.low, lim[1])
  hi <- pmin(tab$conf.high, lim[2])
  lo[is.na(lo)] <- tab$estimate[is.na(lo)]
  hi[is.na(hi)] <- tab$estimate[is.na(hi)]
  rng <- range(c(core, lo, hi), finite = TRUE)
  old <- graphics::par(mar = c(4, max(4, 0.5 * max(nchar(tab$term))), 3, 1))
  on.exit(graphics::par(old))
  graphics::plot(tab$estimate, y, xlim = rng, ylim = c(0.5, k + if (is.null(compare)) 0.5 else 1.2),
                 yaxt = "n", pch = 19,
                 xlab = sprintf("estimate and %s%% interval", format(100 * x$conf.level)), ylab = "",
                 main = main %||% sprintf("Pooled over m = %d (rule %s)", x$m, x$rule), ...)
  graphics::segments(lo, y, hi, y, lwd = 2)
  clipped_lo <- !is.na(tab$conf.low) & tab$conf.low < lo
  clipped_hi <- !is.na(tab$conf.high) & tab$conf.high > hi
  if (any(clipped_lo)) graphics::arrows(tab$estimate[clipped_lo], y[clipped_lo], lo[clipped_lo], y[clipped_lo], length = 0.08, lwd = 2)
  if (any(clipped_hi)) graphics::arrows(tab$estimate[clipped_hi], y[clipped_hi], hi[clipped_hi], y[clipped_hi], length = 0.08, lwd = 2)
  if (!is.null(obs)) {
    graphics::points(obs$estimate.obs, y - 0.2, pch = 1, col = "firebrick")
    graphics::segments(obs$conf.low.obs, y - 0.2, obs$conf.high.obs, y - 0.2, col = "firebrick")
    graphics::legend("top", c("synthetic (pooled)", "real data"), pch = c(19, 1), horiz = TRUE,
                     col = c("black", "firebrick"), bty = "n", cex = 0.8)
  }
  if (any(clipped_lo | clipped_hi)) {
    graphics::mtext("arrows: interval continues beyond the plot", side = 3, line = 0.2, cex = 0.7)
  }
  graphics::abline(v = 0, lty = 3)
  graphics::axis(2, at = y, labels = tab$term, las = 1, cex.axis = 0.8)
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
#' sch <- list(g = list(type = "categorical", categories = c("a", "b", "c")),
#'             x = list(type = "numeric", lower = -4, upper = 4, bins = 8),
#'             y = list(type = "numeric", lower = -6, upper = 6, bins = 8))
#' s <- dp_synthesize(d, "independent", epsilon = 2, m = 4, seed = 2, schema = sch)
#' dp_wald(dp_lm(y ~ g + x, data = s), "g")
#' @export
dp_wald <- function(x, terms = NULL, null = NULL) {
  if (!inherits(x, "dpsynth_pooled") || is.null(x$qhat)) {
    stop("`x` must be a dpsynth_pooled object from dp_glm() or dp_lm()", call. = FALSE)
  }
  all_terms <- colnames(x$qhat)
  if (is.null(terms)) terms <- setdiff(all_terms, "(Intercept)")
  if (length(terms) == 1L && !terms %in% all_terms) {
    terms <- all_terms[startsWith(all_terms, terms)]
  }
  if (!length(terms) || !all(terms %in% all_terms)) {
    stop("`terms` must name coefficients of the model: ", paste(all_terms, collapse = ", "), call. = FALSE)
  }
  j <- match(terms, all_terms)
  # as the engine's PooledResult.wald_test: the data sets valid (after the screens) for every
  # term estimated somewhere
  joint <- which(colSums(is.finite(x$qhat)) > 0)
  ok <- apply(is.finite(x$qhat[, joint, drop = FALSE]), 1, all) &
    vapply(x$uhat, function(u) !is.null(u) && all(is.finite(u[joint, joint])), NA)
  if (sum(ok) < 2L) stop("fewer than 2 data sets are valid for every estimated term", call. = FALSE)
  q <- x$qhat[ok, j, drop = FALSE]
  u <- lapply(x$uhat[ok], function(v) v[j, j, drop = FALSE])
  res <- py_try(dp_py()$inference$wald_test(py_nested(q), py_nested(u), rule = x$rule,
                                            null = if (!is.null(null)) as.list(as.numeric(null)),
                                            dfcom = py_num_or_null(x$dfcom, "dfcom"),
                                            n_syn = if (!is.null(x$n_orig)) mean(x$nobs[ok]),
                                            n_orig = x$n_orig,
                                            names = as.list(terms)),
                "dp_wald")
  out <- py_plain(res)
  keep <- c("statistic", "df1", "df2", "p.value", "riv", "rule", "m", "fallback")
  df <- as.data.frame(out[intersect(keep, names(out))], stringsAsFactors = FALSE)
  df$terms <- paste(terms, collapse = ", ")
  nan_to_na(df)
}

# General utility of synthetic data (engine metrics) and the distinguishing
# audit of a generator's privacy claim.

#' Utility of synthetic data: marginal TVD and pMSE
#'
#' For each synthetic data set, the engine's `dpsynth.metrics.tvd()` (mean
#' total variation distance over all 1-way and 2-way marginals; 0 =
#' identical marginals, 1 = disjoint) and `dpsynth.metrics.pmse()`
#' (propensity-score mean squared error of a logistic model telling real from
#' synthetic rows, and S_pMSE, its ratio to the null expectation: about 1 for
#' a perfect synthesiser; synthpop calls values below about 3 good). The
#' table gives the mean over the m data sets and their spread.
#'
#' Only the holder of the real data can run this: the measures are computed
#' from the real data and are not differentially private.
#'
#' @param real The real data.frame.
#' @param s A `dpsynth_synds` object from [dp_synthesize()] (or a list of
#'   data.frames).
#' @param schema The public schema (as attached by [dp_dataset()]).
#' @param k Marginal orders for TVD (default 1-way and 2-way).
#' @param pmse Compute pMSE / S_pMSE too? (The slowest part on large data.)
#' @param pmse_method `"logit"` (main effects, analytic null) or `"cart"`
#'   (permutation null, slow).
#' @param tvd_mode `"paper"` (complete rows, numerics in 16 equal bins of the
#'   real range, as the PrivBayesE artifact) or `"schema"` (the schema's bins,
#'   available cases per marginal).
#' @return A data.frame of class `dpsynth_utility` with columns `measure`
#'   (`tvd_1way`, `tvd_2way`, `pmse`, `s_pmse`), `value` (mean over data
#'   sets), `sd`, `min`, `max`; the per-data-set values are in
#'   `attr(x, "per_dataset")` (measures x data sets).
#' @examplesIf dpsynthr:::python_available()
#' d <- data.frame(g = factor(sample(c("a", "b"), 300, TRUE)), x = rnorm(300))
#' sch <- dp_schema(d, bounds = list(x = c(-4, 4)))
#' s <- dp_synthesize(d, "independent", epsilon = 1, m = 2, seed = 1, schema = sch)
#' dp_utility(d, s, schema = sch)
#' @export
dp_utility <- function(real, s, schema = attr(real, "dp_schema"), k = 1:2, pmse = TRUE,
                       pmse_method = c("logit", "cart"), tvd_mode = c("paper", "schema")) {
  pmse_method <- match.arg(pmse_method)
  tvd_mode <- match.arg(tvd_mode)
  need(real, "data.frame", "real", "a data.frame")
  frames <- synthetic_frames(s)
  # the measures, per data set and summarised: dpsynth.metrics.utility
  out <- py_call(reticulate::import("dpsynth.metrics", convert = FALSE)$utility, r_to_pandas(real),
                 lapply(frames, r_to_pandas), schema_to_py(schema), k = as.list(as.integer(k)), pmse = pmse,
                 pmse_method = pmse_method, tvd_mode = tvd_mode, what = "dp_utility")
  per <- as.matrix(out$per_dataset[-1L])
  rownames(per) <- out$per_dataset$measure
  structure(out$summary, per_dataset = per, title = out$title, notes = unlist(out$notes),
            class = c("dpsynth_utility", "data.frame"))
}

#' @export
print.dpsynth_utility <- function(x, digits = 4, ...) {
  writeLines(attr(x, "title"))  # the title and the notes are the engine's (dpsynth.metrics.utility)
  df <- data.frame(unclass(x)[names(x)], stringsAsFactors = FALSE)
  df[] <- lapply(df, function(v) if (is.numeric(v)) signif(v, digits) else v)
  print(df, row.names = FALSE)
  writeLines(attr(x, "notes"))
  invisible(x)
}

#' Distinguishing audit of a generator's privacy claim
#'
#' The engine's `dpsynth.audit.distinguishing_audit()`: runs the generator
#' `runs` times on each of two neighbouring data sets D and D' (in D' one row
#' is replaced by a unique row), counts that row in each synthetic output, and
#' turns the best threshold test's error rates (Clopper-Pearson bounds at
#' level `alpha`) into `eps_lo`, an empirical lower bound on the epsilon the
#' generator really has. `passed` is `eps_lo <= claim_epsilon`, the ledger's
#' total (`eps_claimed`) for this pair of data sets under the generator's
#' neighbouring `relation` (twice the ledger's epsilon under add/remove, where
#' a replaced row is two steps). A pass is not a proof of privacy: with `runs`
#' per side the audit cannot detect more than about `max_power`.
#'
#' @param method A generator name (as for [dp_synthesize()]).
#' @param epsilon,delta The budget given to the generator.
#' @param runs Runs per side (D and D').
#' @param n_rows Rows of the audit data sets.
#' @param alpha Significance level of the bound.
#' @param seed Seed for a repeatable audit (`NULL`: OS entropy).
#' @param ... Further generator options.
#' @return An object of class `dpsynth_audit`: a list with `method`, `pair`,
#'   `relation`, `eps_claimed`, `claim_epsilon`, `claim_delta`, `eps_lo`,
#'   `passed`, `threshold`, `false_positives`, `false_negatives`,
#'   `runs_per_side`, `evaluated_per_side`, `alpha`, `max_power`, and
#'   `report` (the lines print shows).
#' @examplesIf dpsynthr:::python_available()
#' dp_audit("independent", epsilon = 1, runs = 20, seed = 1)
#' @export
dp_audit <- function(method, epsilon, delta = NULL, runs = 300, n_rows = 40, alpha = 0.05,
                     seed = NULL, ...) {
  if (!is.character(method) || length(method) != 1L) stop("`method` must be a generator name", call. = FALSE)
  audit <- reticulate::import("dpsynth.audit", convert = FALSE)
  res <- py_call(audit$distinguishing_audit, method, as.numeric(epsilon), delta = py_num_or_null(delta, "delta"),
                 runs = as.integer(runs), n_rows = as.integer(n_rows), alpha = as.numeric(alpha),
                 seed = if (!is.null(seed)) as.integer(seed), ..., what = "dp_audit")
  res$report <- unlist(py_call(audit$audit_report, res, what = "dp_audit"))
  structure(res, class = "dpsynth_audit")
}

#' @export
print.dpsynth_audit <- function(x, ...) {
  writeLines(x$report)  # worded by the engine: dpsynth.audit.audit_report
  invisible(x)
}

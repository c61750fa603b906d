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
#' sch <- list(g = list(type = "categorical", categories = c("a", "b")),
#'             x = list(type = "numeric", lower = -4, upper = 4, bins = 16))
#' s <- dp_synthesize(d, "independent", epsilon = 1, m = 2, seed = 1, schema = sch)
#' dp_utility(d, s, schema = sch)
#' @export
dp_utility <- function(real, s, schema = attr(real, "dp_schema"), k = 1:2, pmse = TRUE,
                       pmse_method = c("logit", "cart"), tvd_mode = c("paper", "schema")) {
  pmse_method <- match.arg(pmse_method)
  tvd_mode <- match.arg(tvd_mode)
  if (!is.data.frame(real)) stop("`real` must be a data.frame", call. = FALSE)
  if (is.null(schema)) {
    stop("no public schema: pass `schema =` (a list or a JSON path)", call. = FALSE)
  }
  frames <- synthetic_frames(s)
  k <- as.integer(k)
  metrics <- reticulate::import("dpsynth.metrics", convert = FALSE)
  schema_py <- schema_to_py(schema)
  real_py <- r_to_pandas(real)
  per <- lapply(frames, function(d) {
    syn_py <- r_to_pandas(d)
    tv <- vapply(k, function(kk) {
      as.numeric(py_plain(py_try(metrics$tvd(real_py, syn_py, schema_py, k = kk, mode = tvd_mode),
                                 "dp_utility (tvd)")))
    }, 0)
    names(tv) <- sprintf("tvd_%dway", k)
    if (!pmse) return(tv)
    pm <- py_plain(py_try(metrics$pmse(real_py, syn_py, method = pmse_method, schema = schema_py)$to_dict(),
                          "dp_utility (pmse)"))
    c(tv, pmse = pm$pmse, s_pmse = pm$s_pmse)
  })
  mat <- do.call(cbind, per)
  colnames(mat) <- paste0("syn", seq_along(frames))
  out <- data.frame(measure = rownames(mat), value = apply(mat, 1, mean),
                    sd = if (ncol(mat) > 1) apply(mat, 1, stats::sd) else NA_real_,
                    min = apply(mat, 1, min), max = apply(mat, 1, max),
                    stringsAsFactors = FALSE, row.names = NULL)
  structure(out, per_dataset = mat, pmse_method = if (pmse) pmse_method, tvd_mode = tvd_mode,
            class = c("dpsynth_utility", "data.frame"))
}

#' @export
print.dpsynth_utility <- function(x, digits = 4, ...) {
  m <- ncol(attr(x, "per_dataset"))
  cat(sprintf("Utility of %d synthetic data set(s) against the real data (mean over data sets)\n", m))
  df <- x
  class(df) <- "data.frame"
  attr(df, "per_dataset") <- NULL
  num <- vapply(df, is.numeric, NA)
  df[num] <- lapply(df[num], signif, digits = digits)
  print(df, row.names = FALSE)
  cat(sprintf("TVD: mean total variation distance over all k-way marginals (mode '%s'; 0 = identical).\n",
              attr(x, "tvd_mode")))
  if (!is.null(attr(x, "pmse_method"))) {
    cat(sprintf("pMSE: %s propensity model; S_pMSE = pMSE / its null expectation (about 1 is ideal; < 3 is usually called good).\n",
                attr(x, "pmse_method")))
  }
  cat("Computed from the real data: not differentially private.\n")
  invisible(x)
}

#' Distinguishing audit of a generator's privacy claim
#'
#' The engine's `dpsynth.audit.distinguishing_audit()`: runs the generator
#' `runs` times on each of two neighbouring data sets D and D' (D' has one
#' unique row added), counts that row in each synthetic output, and turns the
#' best threshold test's error rates (Clopper-Pearson bounds at level
#' `alpha`) into `eps_lo`, an empirical lower bound on the epsilon the
#' generator really has. `passed` is `eps_lo <= eps_claimed` (the ledger's
#' total). A pass is not a proof of privacy: with `runs` per side the audit
#' cannot detect more than about `max_power`.
#'
#' @param method A generator name (as for [dp_synthesize()]).
#' @param epsilon,delta The budget given to the generator.
#' @param runs Runs per side (D and D').
#' @param n_rows Rows of the audit data sets.
#' @param alpha Significance level of the bound.
#' @param seed Seed for a repeatable audit (`NULL`: OS entropy).
#' @param ... Further generator options.
#' @return An object of class `dpsynth_audit`: a list with `method`,
#'   `eps_claimed`, `eps_lo`, `passed`, `threshold`, `false_positives`,
#'   `false_negatives`, `runs_per_side`, `evaluated_per_side`, `alpha`,
#'   `max_power`.
#' @examplesIf dpsynthr:::python_available()
#' dp_audit("independent", epsilon = 1, runs = 20, seed = 1)
#' @export
dp_audit <- function(method, epsilon, delta = NULL, runs = 300, n_rows = 40, alpha = 0.05,
                     seed = NULL, ...) {
  if (!is.character(method) || length(method) != 1L) stop("`method` must be a generator name", call. = FALSE)
  audit <- reticulate::import("dpsynth.audit", convert = FALSE)
  res <- py_try(audit$distinguishing_audit(method, as.numeric(epsilon),
                                           delta = py_num_or_null(delta, "delta"),
                                           runs = as.integer(runs), n_rows = as.integer(n_rows),
                                           alpha = as.numeric(alpha),
                                           seed = if (!is.null(seed)) as.integer(seed), ...),
                "dp_audit")
  structure(py_plain(res), class = "dpsynth_audit")
}

#' @export
print.dpsynth_audit <- function(x, ...) {
  cat(sprintf("Distinguishing audit of '%s' (%d runs per side, %d evaluated)\n",
              x$method, as.integer(x$runs_per_side), as.integer(x$evaluated_per_side)))
  cat(sprintf("  claimed epsilon (ledger):       %s\n", format(signif(x$eps_claimed, 4))))
  cat(sprintf("  empirical lower bound eps_lo:   %s  (Clopper-Pearson, alpha = %s)\n",
              format(signif(x$eps_lo, 4)), format(x$alpha)))
  cat(sprintf("  false positives / negatives:    %d / %d\n",
              as.integer(x$false_positives), as.integer(x$false_negatives)))
  cat(sprintf("  result: %s\n", if (isTRUE(x$passed)) "passed (eps_lo <= claim)" else "FAILED (eps_lo > claim)"))
  cat(sprintf("  (this audit cannot detect epsilon above about %s)\n", format(signif(x$max_power, 3))))
  invisible(x)
}

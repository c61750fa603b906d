# Thin wrappers around the dpsynth engine. Every result is a plain R object
# (no Python pointers), so it survives saveRDS()/readRDS().

#' Load a bundled dataset with its public schema
#'
#' @param name Dataset name: `"adult"`, `"bank"` or `"national"` (see the
#'   engine's `dpsynth.load_dataset`). Real missing values are kept.
#' @return A data.frame with the public schema attached as
#'   `attr(x, "dp_schema")` (a list, one element per column, as in the
#'   schema JSON).
#' @examplesIf dpsynthr:::python_available()
#' adult <- dp_dataset("adult")
#' str(attr(adult, "dp_schema")[1:2])
#' @export
dp_dataset <- function(name) {
  res <- dp_py()$load_dataset(name)
  df <- pandas_to_r(py_item(res, 0L))
  attr(df, "dp_schema") <- py_r(py_item(res, 1L)$to_dict())
  df
}

py_item <- function(x, i) reticulate::py_get_item(x, i)

#' Differentially private synthetic data
#'
#' Fits a DP generator to `data` and draws `m` synthetic datasets, in the
#' style of `synthpop::syn()`. All privacy accounting happens in the Python
#' engine; see [dp_ledger()] for what was spent.
#'
#' @param data A data.frame (the private data), or the path to a Parquet or
#'   CSV file: the marginal-based methods (`"independent"`, `"privbayes"`,
#'   `"privbayes-e"`, `"napsu-mq"`) then count it in DuckDB without loading it.
#' @param method Generator (see `dpsynth.available_methods()`): `"independent"`,
#'   `"privbayes"`, `"privbayes-e"`, `"napsu-mq"`,
#'   `"pmse"`, `"dp-misgan"`, `"kamino"`, `"kamino-i"`, `"mst"`, `"aim"`, `"aim-e"`, `"dpautogan"` or `"dpctgan"`
#'   (method names are passed to Python as given).
#' @param epsilon,delta Privacy budget (`delta = NULL`: the method's default).
#' @param m Number of synthetic datasets.
#' @param seed Integer seed for a repeatable run (for testing, not privacy);
#'   `NULL` draws from OS entropy.
#' @param schema The public schema: from [dp_schema()], a list as attached by
#'   [dp_dataset()], or a path to a schema JSON file.
#' @param analyses The analyses the synthetic data must serve: a formula
#'   (`income ~ age + race + sex`), a string, or a list of them. Passed to
#'   the generator (`"napsu-mq"` measures the marginal tables each analysis
#'   needs, so that its coefficients are not biased towards independence);
#'   `NULL` (default) passes nothing.
#' @param ... Further options passed to `dpsynth.synthesize`.
#' @return An object of class `dpsynth_synds`: a list with `syn` (list of `m`
#'   data.frames), `m`, `method`, `call`, `epsilon`, `delta`, `seed`,
#'   `ledger` (see [dp_ledger()]), `diagnostics` (see [dp_diagnostics()]),
#'   `noise_aware` (`TRUE` when each data set comes from its own posterior
#'   draw, as the rule for fully synthetic data assumes),
#'   `queries` (the public marginal tables the generator measured, a list of
#'   character vectors; `NULL` when it does not say) and `analyses` (the
#'   analysis formulas it was asked to serve), `n_private` (the released
#'   number of private rows, the default `n_orig` of [dp_glm()] and
#'   [dp_pool()]; `NULL` when the generator does not release it). [dp_glm()] warns (class
#'   `dpsynth_uncongenial_warning`) when a model needs a dependency that no
#'   measured table carries. With `method = "napsu-mq"` and columns the
#'   schema declares may be missing (`dp_schema(..., missing = "col")`) the
#'   data sets are completed under missing at random (its default
#'   `missing = "auto"`): `missing_assumption` says so and `missing_share`
#'   holds the released share missing per column. `notes`: the lines print
#'   shows about the missing-data assumption and the posterior sampler's mixing.
#' @examplesIf dpsynthr:::python_available()
#' adult <- dp_dataset("adult")
#' s <- dp_synthesize(adult, "independent", epsilon = 1, m = 2, seed = 1)
#' s
#' dp_ledger(s)
#' @export
dp_synthesize <- function(data, method, epsilon, delta = NULL, m = 1, seed = NULL,
                          schema = attr(data, "dp_schema"), analyses = NULL, ...) {
  call <- match.call()
  schema <- schema_to_py(schema)
  py_data <- if (is.data.frame(data)) {
    r_to_pandas(data)
  } else if (is.character(data) && length(data) == 1L && isTRUE(file.exists(data))) {
    normalizePath(data)
  } else stop("`data` must be a data.frame or the path to an existing Parquet or CSV file", call. = FALSE)
  options <- list(...)
  if (!is.null(analyses)) options$analyses <- analyses_to_py(analyses)
  res <- do.call(dp_py()$synthesize,
                 c(list(py_data, schema, method, as.numeric(epsilon),
                        delta = if (!is.null(delta)) as.numeric(delta),
                        m = as.integer(m), seed = if (!is.null(seed)) as.integer(seed)),
                   options))
  datasets <- reticulate::import_builtins(convert = FALSE)$iter(res$datasets)
  v <- py_r(dp_bridge()$synthesis_for_r(res))  # the rest of the result, as plain values
  structure(list(syn = reticulate::iterate(datasets, pandas_to_r, simplify = FALSE),
                 m = as.integer(m), method = method, call = call,
                 epsilon = epsilon, delta = delta, seed = seed,
                 ledger = structure(v$ledger, total_epsilon = v$total_epsilon, total_delta = v$total_delta,
                                    class = c("dpsynth_ledger", "data.frame")),
                 diagnostics = v$diagnostics, queries = v$queries, noise_aware = v$noise_aware,
                 analyses = as.character(v$analyses), n_private = v$n_private,
                 missing_assumption = v$missing_assumption, missing_share = v$missing_share, notes = v$notes),
            class = "dpsynth_synds")
}

# One formula or string, or a list of them -> a list of formula strings (a Python list).
analyses_to_py <- function(analyses) {
  if (inherits(analyses, "formula")) analyses <- list(analyses)
  if (is.character(analyses)) analyses <- as.list(analyses)
  if (!is.list(analyses)) {
    stop("`analyses` must be a formula (income ~ age + sex), a string, or a list of them", call. = FALSE)
  }
  lapply(unname(analyses), function(a) {
    if (inherits(a, "formula")) return(formula_string(a))
    if (is.character(a) && length(a) == 1L && !is.na(a)) return(a)
    stop("each analysis must be a formula (income ~ age + sex) or one string; got ",
         paste(deparse(a), collapse = " "), call. = FALSE)
  })
}

# A formula as one line of text (long formulas are not cut).
formula_string <- function(f) paste(trimws(deparse(f, width.cutoff = 500L)), collapse = " ")

#' Posterior diagnostics of a synthesis
#'
#' Noise-aware generators (`"napsu-mq"`) report how their posterior was
#' explored: the posterior dimension, Laplace restarts, and for the samplers
#' the largest split R-hat and smallest bulk ESS over the parameters and over
#' the released cells' probabilities (`rhat_max_cells`, `ess_bulk_min_cells`:
#' what the synthetic data depend on), and seconds. They are computed from
#' released values only. R-hat above 1.01 (or `mixed` FALSE) means the sampler
#' did not mix: the spread between the data sets may misstate the posterior, and
#' pooled intervals may be off.
#'
#' @param x A `dpsynth_synds` object from [dp_synthesize()].
#' @return A data.frame with columns `diagnostic` and `value` (character);
#'   no rows for generators that report none.
#' @examplesIf dpsynthr:::python_available()
#' d <- data.frame(g = factor(sample(c("a", "b"), 300, TRUE)),
#'                 y = factor(sample(c("no", "yes"), 300, TRUE)))
#' s <- dp_synthesize(d, "napsu-mq", epsilon = 1, delta = 1e-6, m = 2, seed = 1, schema = dp_schema(d))
#' dp_diagnostics(s)
#' @export
dp_diagnostics <- function(x) {
  need(x, "dpsynth_synds", "x")
  diagnostics_frame(x$diagnostics)
}

diagnostics_frame <- function(d) {
  if (!length(d)) return(data.frame(diagnostic = character(), value = character()))
  data.frame(diagnostic = names(d),
             value = vapply(d, function(v) if (is.numeric(v)) format(signif(v, 4)) else as.character(v), ""),
             row.names = NULL, stringsAsFactors = FALSE)
}

#' The privacy ledger of a synthesis
#'
#' @param x A `dpsynth_synds` object from [dp_synthesize()].
#' @return A data.frame of class `dpsynth_ledger`, one row per spend, with
#'   columns `step, mechanism, epsilon, delta, rho, sensitivity, relation`
#'   (and any further columns the engine records; print shows these seven);
#'   the engine's composed totals are in attributes `total_epsilon` and
#'   `total_delta` and are printed.
#' @export
dp_ledger <- function(x) {
  if (inherits(x, "dpsynth_ledger")) return(x)
  need(x, "dpsynth_synds", "x")
  x$ledger
}

# The engine's composed totals of a ledger, for the printouts.
spent <- function(ledger) {
  sprintf("epsilon = %s, delta = %s", format(attr(ledger, "total_epsilon")), format(attr(ledger, "total_delta")))
}

#' @export
print.dpsynth_ledger <- function(x, ...) {
  core <- c("step", "mechanism", "epsilon", "delta", "rho", "sensitivity", "relation")
  cat("Privacy ledger (", nrow(x), " spends; all columns: as.data.frame(x))\n", sep = "")
  print(as.data.frame(unclass(x))[intersect(core, names(x))], ...)
  cat("Total (composed by the engine): ", spent(x), "\n", sep = "")
  invisible(x)
}

#' @export
print.dpsynth_synds <- function(x, ...) {
  cat("Call:\n($call) ", paste(deparse(x$call), collapse = "\n"), "\n\n", sep = "")
  cat("Method: ($method) ", x$method, "\n", sep = "")
  cat("Number of synthesised data sets: ($m) ", x$m, "\n", sep = "")
  cat("Privacy spent: ", spent(x$ledger), " (budget epsilon = ", format(x$epsilon), "; see dp_ledger())\n", sep = "")
  if (length(x$analyses)) cat("Analyses served: ", paste(x$analyses, collapse = "; "), "\n", sep = "")
  if (!is.null(x$queries)) {
    cat("Measured marginal tables: ", length(x$queries), " ($queries; dp_glm() warns when a model needs ",
        "one that is missing)\n", sep = "")
  }
  writeLines(as.character(x$notes))  # missing-data assumption, sampler mixing: dpsynth.bridge.synthesis_notes
  if (length(x$syn)) {
    cat("Synthetic data: ", nrow(x$syn[[1]]), " rows x ", ncol(x$syn[[1]]), " columns\n\n",
        "First rows of synthesised data set 1: ($syn[[1]])\n", sep = "")
    print(utils::head(x$syn[[1]]))
  }
  invisible(x)
}

#' @export
summary.dpsynth_synds <- function(object, msel = 1L, ...) {
  structure(list(method = object$method, m = object$m, ledger = object$ledger,
                 msel = msel, summaries = lapply(object$syn[msel], summary, ...)),
            class = "summary.dpsynth_synds")
}

#' @export
print.summary.dpsynth_synds <- function(x, ...) {
  cat("Method: ", x$method, "; ", x$m, " synthetic data set(s); epsilon spent = ",
      format(attr(x$ledger, "total_epsilon")), "\n", sep = "")
  for (i in seq_along(x$summaries)) {
    cat("\nSynthetic data set ", x$msel[i], ":\n", sep = "")
    print(x$summaries[[i]])
  }
  invisible(x)
}

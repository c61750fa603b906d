# Thin wrappers around the dpsynth engine. Every result is a plain R object
# (no Python pointers), so it survives saveRDS()/readRDS().

# dp_dataset(): documented in man/dp_dataset.Rd
dp_dataset <- function(name) {
  res <- dp_py()$load_dataset(name)
  df <- pandas_to_r(py_item(res, 0L))
  attr(df, "dp_schema") <- py_r(py_item(res, 1L)$to_dict())
  df
}

py_item <- function(x, i) reticulate::py_get_item(x, i)

# dp_synthesize(): documented in man/dp_synthesize.Rd
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

# dp_diagnostics(): documented in man/dp_diagnostics.Rd
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

# dp_ledger(): documented in man/dp_ledger.Rd
dp_ledger <- function(x) {
  if (inherits(x, "dpsynth_ledger")) return(x)
  need(x, "dpsynth_synds", "x")
  x$ledger
}

# The engine's composed totals of a ledger, for the printouts.
spent <- function(ledger) {
  sprintf("epsilon = %s, delta = %s", format(attr(ledger, "total_epsilon")), format(attr(ledger, "total_delta")))
}

print.dpsynth_ledger <- function(x, ...) {
  core <- c("step", "mechanism", "epsilon", "delta", "rho", "sensitivity", "relation")
  cat("Privacy ledger (", nrow(x), " spends; all columns: as.data.frame(x))\n", sep = "")
  print(as.data.frame(unclass(x))[intersect(core, names(x))], ...)
  cat("Total (composed by the engine): ", spent(x), "\n", sep = "")
  invisible(x)
}

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

summary.dpsynth_synds <- function(object, msel = 1L, ...) {
  structure(list(method = object$method, m = object$m, ledger = object$ledger,
                 msel = msel, summaries = lapply(object$syn[msel], summary, ...)),
            class = "summary.dpsynth_synds")
}

print.summary.dpsynth_synds <- function(x, ...) {
  cat("Method: ", x$method, "; ", x$m, " synthetic data set(s); epsilon spent = ",
      format(attr(x$ledger, "total_epsilon")), "\n", sep = "")
  for (i in seq_along(x$summaries)) {
    cat("\nSynthetic data set ", x$msel[i], ":\n", sep = "")
    print(x$summaries[[i]])
  }
  invisible(x)
}

# dp_progress(): documented in man/dp_progress.Rd
dp_progress <- function(on = TRUE) {
  if (!is.logical(on) || length(on) != 1L || is.na(on)) {
    stop("`on` must be TRUE or FALSE", call. = FALSE)
  }
  dp_py()$progress$enable(on)
  invisible(on)
}

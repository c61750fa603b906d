# The public schema from an R data.frame's declared metadata (the engine's
# Schema.from_dataframe), and its conversion to and from the engine.

# dp_schema(): documented in man/dp_schema.Rd
dp_schema <- function(data, bounds = list(), levels = list(), bins = 16L, epsilon = NULL, delta = NULL,
                      seed = NULL, missing = NULL) {
  need(data, "data.frame", "data", "a data.frame")
  # a named list -> a dict of Python lists; anything else goes as it is, for the engine to refuse
  by_column <- function(x, as) if (is.list(x) && length(x)) lapply(x, function(v) as.list(as(v))) else if (length(x)) x
  # undeclared domains, and bounds or levels not given by column, are errors (worded for R) in the
  # engine: Schema.from_dataframe(syntax = "r")
  bins <- if (is.list(bins)) lapply(bins, as.integer) else as.integer(bins)
  sch <- py_try(dp_py()$Schema$from_dataframe(
    r_to_pandas(data), bounds = by_column(bounds, as.numeric), levels = by_column(levels, as.character), bins = bins,
    epsilon = py_num_or_null(epsilon, "epsilon"), delta = py_num_or_null(delta, "delta"),
    seed = if (!is.null(seed)) as.integer(seed),
    missing = if (isTRUE(missing)) TRUE else if (length(missing)) as.list(as.character(missing)), syntax = "r"),
    "dp_schema")
  structure(py_r(sch$to_dict()), class = "dpsynth_schema")
}

print.dpsynth_schema <- function(x, ...) {
  cat("Public schema (", length(x$columns), " columns)\n", sep = "")
  print(py_r(schema_to_py(x)$describe()), right = FALSE)  # column, type, domain, source: dpsynth.Schema.describe
  if (!is.null(x$privacy)) {
    cat(sprintf("Learned under DP: epsilon = %s, delta = %s (%d spends), charged to every release's ledger\n",
                x$privacy$epsilon, x$privacy$delta, length(x$privacy$spends)))
  }
  invisible(x)
}

# An R schema (list, dpsynth_schema, or JSON path) -> the engine's Schema (dpsynth.bridge.schema_from_r
# boxes one-element category vectors, which R cannot tell from scalars).
schema_to_py <- function(schema) {
  if (is.null(schema)) {
    stop("no public schema: pass `schema = dp_schema(data, bounds = list(...))` (or a list or a JSON path); ",
         "dpsynthr never reads categories or bounds from the private data for free", call. = FALSE)
  }
  if (is.character(schema) && length(schema) == 1L) return(dp_py()$Schema$from_json(schema))
  py_try(dp_bridge()$schema_from_r(as.character(jsonlite::toJSON(unclass(schema), auto_unbox = TRUE, null = "null",
                                                                  digits = NA))), "schema")
}

# The schema with `column` declared a function of `from` (man/dp_derived.Rd); the engine checks it.
dp_derived <- function(schema, column, from, map = NULL) {
  if (!is.list(schema)) stop("`schema` must be a schema from dp_schema() or attr(dp_dataset(...), \"dp_schema\")",
                             call. = FALSE)
  for (arg in c("column", "from")) {
    v <- get(arg)
    if (!is.character(v) || length(v) != 1L || is.na(v)) stop(sprintf("`%s` must be one column name", arg), call. = FALSE)
  }
  spec <- unclass(schema)
  in_columns <- is.list(spec$columns)
  cols <- if (in_columns) spec$columns else spec
  if (is.null(cols[[column]])) {
    stop(sprintf("column '%s' is not in the schema; its columns are %s", column, paste(names(cols), collapse = ", ")),
         call. = FALSE)
  }
  cols[[column]]$derived_from <- if (is.null(map)) from else list(column = from, map = as.list(map))
  if (in_columns) spec$columns <- cols else spec <- cols
  structure(py_r(schema_to_py(spec)$to_dict()), class = "dpsynth_schema")
}

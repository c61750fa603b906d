# The public schema from an R data.frame's declared metadata (the engine's
# Schema.from_dataframe), and its conversion to and from the engine.

#' Public schema from a data.frame's declared metadata
#'
#' Builds the public schema [dp_synthesize()] needs from what the user
#' *declares*, never from the private rows for free: column kinds from the R
#' types (factor: categorical; logical: categorical `FALSE`/`TRUE`; integer and
#' double: numeric; character: categorical), the categories of a factor from
#' its levels (metadata you declare public by making the column a factor with
#' those levels; unused levels are kept and the schema records this in each
#' column's `source`), and numeric bounds from `bounds`.
#'
#' A numeric column without bounds (or a character column without `levels`)
#' is an error that names every such column and shows the call to fix it,
#' unless `epsilon` is given: then the missing bounds are learned with OpenDP's
#' private quantiles (1\% and 99\%, over a public grid of candidate values) and
#' the missing categories with OpenDP's thresholded (stable) histogram, which
#' needs `delta`. That spend is kept in the schema (`$privacy`) and charged to
#' the ledger of every release made with it, on top of the generator's
#' `epsilon` (see [dp_ledger()]). Values outside learned bounds are clipped.
#'
#' @param data A data.frame (the private data; not modified, and only read
#'   when `epsilon` is given).
#' @param bounds Public bounds of the numeric columns: a named list,
#'   `list(age = c(0, 22), wgt = c(2, 120))`.
#' @param levels Public categories of character columns (or to override a
#'   factor's levels): a named list of character vectors.
#' @param bins Equal-width bins of every numeric column (one integer), or a
#'   named list per column.
#' @param epsilon Privacy budget for learning what is not declared; `NULL`
#'   (default): learn nothing, and stop if something is missing.
#' @param delta For learning categories of character columns (e.g. `1e-6`).
#' @param seed Integer seed for a repeatable learning step (tests only: not
#'   private).
#' @param missing The columns that may have missing values (a character
#'   vector; `TRUE`: every column): public knowledge you declare, never read
#'   from the rows. `"napsu-mq"` completes these columns under missing at
#'   random (MAR) by default; a column with missing values that is not
#'   declared is an error there.
#' @return An object of class `dpsynth_schema`: a list with `columns` (one
#'   element per column: `type`, `categories` or `lower`/`upper`/`bins`,
#'   `source`) and, when something was learned, `privacy` (its `epsilon`,
#'   `delta` and `spends`). Pass it as `schema =` to [dp_synthesize()].
#' @examplesIf dpsynthr:::python_available()
#' d <- data.frame(sex = factor(c("F", "M", NA)), age = c(31, 45, 60))
#' dp_schema(d, bounds = list(age = c(0, 120)), missing = "sex")
#' try(dp_schema(d))
#' @export
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

#' @export
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

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
  if (!is.data.frame(data)) stop("`data` must be a data.frame", call. = FALSE)
  named_list <- function(x, what) {
    if (is.null(x)) return(list())
    if (!is.list(x) || (length(x) && is.null(names(x)))) {
      stop(sprintf("`%s` must be a named list, e.g. %s = list(age = %s)", what, what,
                   if (what == "levels") 'c("a", "b")' else "c(0, 100)"), call. = FALSE)
    }
    x
  }
  bounds <- named_list(bounds, "bounds")
  levels <- named_list(levels, "levels")
  undeclared <- function(test, given) setdiff(names(data)[vapply(data, test, NA)], names(given))
  need_b <- undeclared(function(x) is.numeric(x) && !is.factor(x), bounds)
  need_l <- undeclared(is.character, levels)
  if ((length(need_b) || length(need_l)) && is.null(epsilon)) {
    stop(if (length(need_b)) sprintf("numeric columns without bounds: %s; declare public bounds:\n  dp_schema(data, bounds = list(%s))\n",
                                    paste(need_b, collapse = ", "), paste0(need_b, " = c(lo, hi)", collapse = ", ")),
         if (length(need_l)) sprintf("character columns without categories: %s; declare them with levels = list(...) or make them factors\n",
                                    paste(need_l, collapse = ", ")),
         "or learn them under differential privacy (charged to every release's ledger): dp_schema(data, epsilon = 0.1",
         if (length(need_l)) ", delta = 1e-6", ")", call. = FALSE)
  }
  bins <- if (is.list(bins)) lapply(bins, as.integer) else as.integer(bins)
  sch <- py_try(dp_py()$Schema$from_dataframe(
    r_to_pandas(data), bounds = if (length(bounds)) lapply(bounds, function(b) as.list(as.numeric(b))),
    levels = if (length(levels)) lapply(levels, function(l) as.list(as.character(l))), bins = bins,
    epsilon = py_num_or_null(epsilon, "epsilon"), delta = py_num_or_null(delta, "delta"),
    seed = if (!is.null(seed)) as.integer(seed),
    missing = if (isTRUE(missing)) TRUE else if (length(missing)) as.list(as.character(missing))), "dp_schema")
  structure(schema_to_r(sch), class = "dpsynth_schema")
}

#' @export
print.dpsynth_schema <- function(x, ...) {
  domain <- vapply(x$columns, function(c) {
    if (identical(c$type, "categorical")) return(paste(unlist(c$categories), collapse = ", "))
    sprintf("[%s, %s], %s bins%s", c$lower, c$upper, c$bins %||% 16L, if (isTRUE(c$integer)) ", integer" else "")
  }, "")
  cat("Public schema (", length(domain), " columns)\n", sep = "")
  domain[] <- paste0(domain, ifelse(vapply(x$columns, function(c) isTRUE(c$missing), NA), " (may be missing)", ""))
  print(data.frame(column = names(domain), type = vapply(x$columns, `[[`, "", "type"), domain = domain,
                   source = vapply(x$columns, function(c) c$source %||% "", ""), row.names = NULL), right = FALSE)
  if (!is.null(x$privacy)) {
    cat(sprintf("Learned under DP: epsilon = %s, delta = %s (%d spends), charged to every release's ledger\n",
                x$privacy$epsilon, x$privacy$delta, length(x$privacy$spends)))
  }
  invisible(x)
}

# Schema <-> R list via JSON, so that one-element category lists stay lists
# and nulls stay nulls (reticulate's list conversion simplifies both).
schema_to_r <- function(schema_py) {
  json <- reticulate::import("json", convert = FALSE)
  jsonlite::fromJSON(reticulate::py_to_r(json$dumps(schema_py$to_dict())),
                     simplifyVector = FALSE)
}

schema_to_py <- function(schema) {
  dp <- dp_py()
  if (is.character(schema) && length(schema) == 1L) return(dp$Schema$from_json(schema))
  if (!is.list(schema)) {
    stop("`schema` must be a list (from dp_schema(), or as attr(dp_dataset(...), \"dp_schema\")) or a path ",
         "to a schema JSON file", call. = FALSE)
  }
  schema <- unclass(schema)
  # Keep vectors such as `categories = "a"` as JSON arrays.
  protect <- function(cols) lapply(cols, function(col) {
    if (is.list(col) && !is.null(col$categories) && is.atomic(col$categories)) {
      col$categories <- I(col$categories)
    }
    col
  })
  if (is.list(schema[["columns"]])) schema[["columns"]] <- protect(schema[["columns"]]) else schema <- protect(schema)
  txt <- as.character(jsonlite::toJSON(schema, auto_unbox = TRUE, null = "null", digits = NA))
  dp$Schema$from_dict(reticulate::import("json", convert = FALSE)$loads(txt))
}

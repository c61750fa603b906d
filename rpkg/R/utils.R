# Small helpers for calling the engine with plain values and getting plain
# R values back. reticulate 1.28 cannot exchange numpy arrays or numpy
# scalars with numpy >= 2, so numbers go to Python as (nested) lists and come
# back through the bridge's `plain()` (or as a pandas DataFrame through
# pandas_to_r()).

`%||%` <- function(a, b) if (is.null(a)) b else a

# R numbers -> nested Python lists: a vector becomes a list of numbers, a
# matrix a list of rows, a list is converted element by element (so a list
# of m covariance matrices becomes an m x p x p nested list).
py_nested <- function(x, what = "value") {
  if (is.data.frame(x)) x <- as.matrix(x)
  if (is.matrix(x)) {
    if (!is.numeric(x) && !all(is.na(x))) stop(sprintf("`%s` must be numeric", what), call. = FALSE)
    storage.mode(x) <- "double"
    return(lapply(seq_len(nrow(x)), function(i) as.list(unname(x[i, ]))))
  }
  if (is.list(x)) return(lapply(unname(x), py_nested, what = what))
  if (is.numeric(x) || is.logical(x) && all(is.na(x))) return(as.list(unname(as.numeric(x))))
  stop(sprintf("`%s` must be numbers: a vector, a matrix (one row per data set) or a list of them",
               what), call. = FALSE)
}

# A number or NULL for an optional argument.
py_num_or_null <- function(x, what) {
  if (is.null(x)) return(NULL)
  if (!is.numeric(x) || length(x) != 1L || is.na(x)) {
    stop(sprintf("`%s` must be one number or NULL", what), call. = FALSE)
  }
  as.numeric(x)
}

# A Python result -> plain R values (lists, numbers, strings), via the
# bridge's plain(); Python None -> NULL, NaN stays NaN.
py_plain <- function(x) reticulate::py_to_r(dp_bridge()$plain(x))

# Run `expr` (a call into the engine) and turn a Python exception into an R
# error that starts with `what` and keeps only the Python message (no
# reticulate traceback).
py_try <- function(expr, what) {
  tryCatch(expr, error = function(e) {
    msg <- conditionMessage(e)
    msg <- sub("\n*Detailed traceback:.*$", "", msg)
    msg <- sub("^Error in py_call_impl\\([^)]*\\) :\\s*", "", msg)
    msg <- sub("^Evaluation error: ", "", msg)
    stop(what, ": ", trimws(msg), call. = FALSE)
  })
}

# NaN -> NA in every double column of a data.frame (the engine's NaN means
# "not defined"; R users expect NA).
nan_to_na <- function(df) {
  for (j in seq_along(df)) {
    if (is.double(df[[j]])) df[[j]][is.nan(df[[j]])] <- NA_real_
  }
  df
}

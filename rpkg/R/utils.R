# Small helpers for calling the engine with plain values and getting plain
# R values back. reticulate 1.28 cannot exchange numpy arrays or numpy
# scalars with numpy >= 2, so numbers go to Python as (nested) lists and come
# back as JSON (py_r(), py_call()) or as a pandas DataFrame (pandas_to_r()).

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

# A Python value -> plain R values, through the bridge's JSON (dpsynth.bridge.for_r): lists stay
# lists, None -> NULL, NaN -> NA (the engine's "not defined"), Inf survives, DataFrames come back as
# data.frames and the bridge's r_vec() lists as vectors.
py_r <- function(x) from_r_json(dp_bridge()$to_r_json(x))

from_r_json <- function(json) r_values(jsonlite::fromJSON(reticulate::py_to_r(json), simplifyVector = FALSE))

r_values <- function(x) {
  if (!is.list(x)) return(x)
  if (identical(names(x), "$num")) return(if (x[[1L]] == "NaN") NA_real_ else as.numeric(x[[1L]]))
  if (identical(names(x), "$frame")) return(frame_from_parts(r_values(x[[1L]])))
  if (identical(names(x), "$vec")) return(unlist(r_values(x[[1L]])))
  x[] <- lapply(x, r_values)
  x
}

# Call the engine's `fn` (dpsynth.bridge.call_for_r): its value as plain R values (as py_r()), its
# Python warnings raised as R warnings of the engine's class (dpsynth_..._warning, the warning's
# data as fields), a Python error as an R error that starts with `what`.
py_call <- function(fn, ..., what) {
  out <- from_r_json(py_try(dp_bridge()$call_for_r(fn, ..., r_caller = what), what))
  for (w in out$warnings) {
    warning(structure(class = c(w$class, "warning", "condition"), c(list(message = w$message, call = NULL), lapply(w$data, unlist))))
  }
  out$value
}

# print() of the classes whose format() gives the lines.
print_lines <- function(x, ...) {
  writeLines(format(x, ...))
  invisible(x)
}

# Argument checks, worded once.
need <- function(x, cls, arg, what = sprintf("a %s object", cls)) {
  if (!inherits(x, cls)) stop(sprintf("`%s` must be %s", arg, what), call. = FALSE)
}

need_fit <- function(x, arg) {
  if (!inherits(x, "dpsynth_pooled") || is.null(x$qhat)) {
    stop(sprintf("`%s` must be a dpsynth_pooled object from dp_glm() or dp_lm()", arg), call. = FALSE)
  }
}

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

# mice interop: with() on a release gives a mice mira; dp_as_mids() gives a mice mids.

# What pooling needs to know of a release (with() keeps it in the mira); NULL for a list of data.frames.
synds_info <- function(data) {
  if (!inherits(data, "dpsynth_synds")) return(NULL)
  list(method = data$method, m = data$m, ledger = data$ledger, noise_aware = data$noise_aware,
       queries = data$queries, n_private = data$n_private, columns = if (length(data$syn)) names(data$syn[[1]]))
}

# with.dpsynth_synds(): documented in man/with.dpsynth_synds.Rd
with.dpsynth_synds <- function(data, expr, ...) {
  call <- match.call()
  expr <- substitute(expr)
  env <- parent.frame()
  analyses <- lapply(data$syn, function(d) eval(expr, d, env))
  structure(list(call = call, call1 = data$call, nmis = NULL, analyses = analyses, dpsynth = synds_info(data)),
            class = c("dpsynth_mira", "mira", "matrix"))
}

print.dpsynth_mira <- function(x, ...) {
  cat("Class: mira (from with() on a dpsynth_synds)    m = ", length(x$analyses), "\n", sep = "")
  cat("Call: ", paste(deparse(x$call), collapse = " "), "\n", sep = "")
  cat("Synthesis: ", x$dpsynth$method %||% "?", "\n", sep = "")
  cat("Pool with dp_pool() (fully synthetic data; mice::pool.syn() and mice::pool() also accept it)\n")
  invisible(x)
}

# dp_as_mids(): documented in man/with.dpsynth_synds.Rd
dp_as_mids <- function(x) {
  need(x, "dpsynth_synds", "x")
  if (!requireNamespace("mice", quietly = TRUE)) stop("dp_as_mids() needs the mice package", call. = FALSE)
  rows <- vapply(x$syn, nrow, 0L)
  if (length(unique(rows)) != 1L) {
    stop("the synthetic data sets have different numbers of rows (", paste(rows, collapse = ", "),
         "); a mids needs equal ones", call. = FALSE)
  }
  blank <- x$syn[[1L]]
  blank[] <- lapply(blank, function(v) replace(v, TRUE, NA))  # no observed cell: types and levels only
  # mice::as.mids() would initialise imputations from observed values, and there are none: the mids
  # is made as as.mids() makes it (mice() with maxit = 0), with no method, then filled in.
  imp <- mice::mice(blank, m = length(x$syn), where = matrix(TRUE, nrow(blank), ncol(blank)), method = "",
                    maxit = 0, remove.collinear = FALSE, allow.na = TRUE, print = FALSE)
  for (v in names(blank)) imp$imp[[v]][] <- lapply(x$syn, `[[`, v)
  imp$call <- x$call
  imp
}

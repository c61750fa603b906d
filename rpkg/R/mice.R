# mice interop: with() on a release gives a mice mira; dp_as_mids() gives a mice mids.

# What pooling needs to know of a release (with() keeps it in the mira); NULL for a list of data.frames.
synds_info <- function(data) {
  if (!inherits(data, "dpsynth_synds")) return(NULL)
  list(method = data$method, m = data$m, ledger = data$ledger, noise_aware = data$noise_aware,
       queries = data$queries, n_private = data$n_private, columns = if (length(data$syn)) names(data$syn[[1]]))
}

#' A release, mice style: with() and dp_as_mids()
#'
#' `with(res, lm(wgt ~ age + reg))` evaluates the expression in each of the m
#' synthetic data sets of `res` (as `with()` on a mice `mids`) and returns a
#' mice `mira`. Pool it with [dp_pool()]: the rule for fully synthetic data,
#' the one that fits a DP release, with the checks that need the release (a
#' generator that is not noise-aware, a model its tables do not carry).
#' `mice::pool()` (Rubin's rules for multiply imputed data) and
#' `mice::pool.syn()` (partially synthetic data) accept it too, for
#' comparison; they are not the rule for a fully synthetic release.
#'
#' `dp_as_mids(res)` gives the release as a mice `mids`, for mice's own verbs:
#' `with(imp, lm(...))`, `mice::complete(imp, i)` (data set i) or
#' `mice::complete(imp, "long")`. A `mids` holds the original incomplete data
#' (`.imp = 0`) and imputations of its missing cells; a DP release has no
#' original data and every cell is synthetic. So `.imp = 0` has the release's
#' columns (types, factor levels) and `NA` in every cell: it is neither the
#' private data nor a synthetic data set. Every cell counts as imputed
#' (`where` all `TRUE`), and imputation i is synthetic data set i as released,
#' its missing values included. Its fits are a plain `mira` without the
#' release, so [dp_pool()] pools them without those checks; mice's functions
#' that need observed values (`mice::mice.mids()`, plots of observed against
#' imputed values) have nothing to work from.
#'
#' @param data,x A `dpsynth_synds` object from [dp_synthesize()] (for
#'   `dp_as_mids()`, with data sets of equal size, as mice requires).
#' @param expr An expression, typically a model call such as `lm(y ~ x)`,
#'   evaluated with the columns of each synthetic data set in scope.
#' @param ... Not used.
#' @return `with()`: an object of class `c("dpsynth_mira", "mira", "matrix")`,
#'   as `mice::as.mira()` makes: `call`, `call1` (the synthesis call), `nmis`
#'   (`NULL`), `analyses` (the m results), and `dpsynth` (method, ledger,
#'   whether the generator is noise-aware, released marginal tables) so that
#'   [dp_pool()] can warn where the rule does not apply. `dp_as_mids()`: a
#'   mice `mids` with m imputations whose `call` is the synthesis call.
#' @examplesIf dpsynthr:::python_available()
#' d <- data.frame(x = rnorm(200))
#' d$y <- 1 + d$x + rnorm(200)
#' sch <- dp_schema(d, bounds = list(x = c(-4, 4), y = c(-4, 6)))
#' s <- dp_synthesize(d, "independent", epsilon = 1, m = 3, seed = 1, schema = sch)
#' fit <- with(s, lm(y ~ x))
#' dp_pool(fit)
#' if (requireNamespace("mice", quietly = TRUE)) {
#'   imp <- dp_as_mids(s)
#'   summary(mice::pool.syn(with(imp, lm(y ~ x))))
#' }
#' @export
with.dpsynth_synds <- function(data, expr, ...) {
  call <- match.call()
  expr <- substitute(expr)
  env <- parent.frame()
  analyses <- lapply(data$syn, function(d) eval(expr, d, env))
  structure(list(call = call, call1 = data$call, nmis = NULL, analyses = analyses, dpsynth = synds_info(data)),
            class = c("dpsynth_mira", "mira", "matrix"))
}

#' @export
print.dpsynth_mira <- function(x, ...) {
  cat("Class: mira (from with() on a dpsynth_synds)    m = ", length(x$analyses), "\n", sep = "")
  cat("Call: ", paste(deparse(x$call), collapse = " "), "\n", sep = "")
  cat("Synthesis: ", x$dpsynth$method %||% "?", "\n", sep = "")
  cat("Pool with dp_pool() (fully synthetic data; mice::pool.syn() and mice::pool() also accept it)\n")
  invisible(x)
}

#' @rdname with.dpsynth_synds
#' @export
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

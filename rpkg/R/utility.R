# General utility of synthetic data (engine metrics) and the distinguishing
# audit of a generator's privacy claim.

# dp_utility(): documented in man/dp_utility.Rd
dp_utility <- function(real, s, schema = attr(real, "dp_schema"), k = 1:2, pmse = TRUE,
                       pmse_method = c("logit", "cart"), tvd_mode = c("paper", "schema")) {
  pmse_method <- match.arg(pmse_method)
  tvd_mode <- match.arg(tvd_mode)
  need(real, "data.frame", "real", "a data.frame")
  frames <- synthetic_frames(s)
  # the measures, per data set and summarised: dpsynth.metrics.utility
  out <- py_call(reticulate::import("dpsynth.metrics", convert = FALSE)$utility, r_to_pandas(real),
                 lapply(frames, r_to_pandas), schema_to_py(schema), k = as.list(as.integer(k)), pmse = pmse,
                 pmse_method = pmse_method, tvd_mode = tvd_mode, what = "dp_utility")
  per <- as.matrix(out$per_dataset[-1L])
  rownames(per) <- out$per_dataset$measure
  structure(out$summary, per_dataset = per, title = out$title, notes = unlist(out$notes),
            class = c("dpsynth_utility", "data.frame"))
}

print.dpsynth_utility <- function(x, digits = 4, ...) {
  writeLines(attr(x, "title"))  # the title and the notes are the engine's (dpsynth.metrics.utility)
  df <- data.frame(unclass(x)[names(x)], stringsAsFactors = FALSE)
  df[] <- lapply(df, function(v) if (is.numeric(v)) signif(v, digits) else v)
  print(df, row.names = FALSE)
  writeLines(attr(x, "notes"))
  invisible(x)
}

# dp_audit(): documented in man/dp_audit.Rd
dp_audit <- function(method, epsilon, delta = NULL, runs = 300, n_rows = 40, alpha = 0.05,
                     seed = NULL, ...) {
  if (!is.character(method) || length(method) != 1L) stop("`method` must be a generator name", call. = FALSE)
  audit <- reticulate::import("dpsynth.audit", convert = FALSE)
  res <- py_call(audit$distinguishing_audit, method, as.numeric(epsilon), delta = py_num_or_null(delta, "delta"),
                 runs = as.integer(runs), n_rows = as.integer(n_rows), alpha = as.numeric(alpha),
                 seed = if (!is.null(seed)) as.integer(seed), ..., what = "dp_audit")
  res$report <- unlist(py_call(audit$audit_report, res, what = "dp_audit"))
  structure(res, class = "dpsynth_audit")
}

print.dpsynth_audit <- function(x, ...) {
  writeLines(x$report)  # worded by the engine: dpsynth.audit.audit_report
  invisible(x)
}

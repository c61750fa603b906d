# The pooled synthetic-data fit beside the same model on the real data, as
# synthpop's compare.fit.synds.

# dp_compare(): documented in man/dp_compare.Rd
dp_compare <- function(pooled, real_data) {
  need_fit(pooled, "pooled")
  need(real_data, "data.frame", "real_data", "a data.frame")
  family <- if (identical(pooled$model, "glm")) family_object(pooled$family)
  fit <- fit_one_dataset(pooled$model, pooled$formula, family, NULL, globalenv(), real_data)$fit
  if (inherits(fit, "error")) {
    stop("the model could not be fitted to the real data: ", conditionMessage(fit), call. = FALSE)
  }
  cf <- stats::coef(fit)
  out <- list(n_used = stats::nobs(fit), n_dropped = nrow(real_data) - stats::nobs(fit), rule = pooled$rule,
              m = pooled$m, model = model_label(pooled), conf.level = pooled$conf.level)
  # the real-data intervals, the comparison (differences, CI overlap) and its printout: the engine's
  cmp <- py_call(dp_bridge()$compare_for_r, r_to_pandas(pooled$pooled), as.list(names(cf)), as.list(unname(cf)),
                 as.list(unname(sqrt(diag(stats::vcov(fit)))[names(cf)])), m = out$m, rule = out$rule,
                 model = out$model, n_used = out$n_used, n_dropped = out$n_dropped, conf_level = out$conf.level,
                 family = family$family %||% "gaussian", df_resid = stats::df.residual(fit), what = "dp_compare")
  structure(c(cmp[c("table", "mean_abs_std_diff", "mean_ci_overlap")], out, cmp[c("header", "footer")]),
            class = "dpsynth_compare")
}

format.dpsynth_compare <- function(x, digits = 3, ...) {
  tab <- x$table
  show <- data.frame(Synthetic = tab$estimate.syn, Observed = tab$estimate.obs, Diff = tab$diff,
                     `Std. coef diff` = tab$std.diff, `CI overlap` = tab$ci.overlap,
                     check.names = FALSE, row.names = tab$term)
  show[] <- lapply(show, function(v) round(v, digits))
  c(x$header, utils::capture.output(print(show)), x$footer)  # the lines around the table: the engine's
}

print.dpsynth_compare <- function(x, ...) print_lines(x, ...)

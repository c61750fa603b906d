# The analyst report: an R Markdown template rendered with rmarkdown.

# dp_report(): documented in man/dp_report.Rd
dp_report <- function(x, formula = NULL, family = gaussian, file = "report.html", rule = "synthetic",
                      real = NULL, title = "dpsynth analyst report", quiet = TRUE, ...) {
  synthesis <- NULL
  if (inherits(x, "dpsynth_synds")) {
    if (is.null(formula)) stop("give the model: dp_report(s, formula = y ~ x, family = ...)", call. = FALSE)
    synthesis <- unclass(x)[c("method", "m", "ledger", "diagnostics", "missing_assumption", "missing_share")]
    pooled <- dp_glm(formula, family = as_family(family, parent.frame()), data = x, rule = rule, ...)
  } else if (inherits(x, "dpsynth_pooled")) {
    pooled <- x
  } else {
    stop("`x` must be a dpsynth_pooled object (dp_glm, dp_lm) or a dpsynth_synds object (dp_synthesize)",
         call. = FALSE)
  }
  if (!is.character(file) || length(file) != 1L || !nzchar(file)) {
    stop("`file` must be one file name, e.g. \"report.html\"", call. = FALSE)
  }
  out_dir <- dirname(file)
  if (!dir.exists(out_dir)) stop(sprintf("the folder '%s' does not exist", out_dir), call. = FALSE)
  if (!requireNamespace("rmarkdown", quietly = TRUE) || !rmarkdown::pandoc_available()) {
    stop("dp_report needs the rmarkdown package and pandoc (Debian: apt-get install r-cran-rmarkdown pandoc)",
         call. = FALSE)
  }
  compare <- if (!is.null(real)) dp_compare(pooled, real)

  work <- tempfile("dpsynthr-report-")
  dir.create(work)
  on.exit(unlink(work, recursive = TRUE), add = TRUE)
  template <- system.file("report", "analyst.Rmd", package = "dpsynthr", mustWork = TRUE)
  input <- file.path(work, "analyst.Rmd")
  file.copy(template, input)
  out_dir <- normalizePath(out_dir)
  tmp <- basename(tempfile(".dpsynthr-report-", tmpdir = out_dir, fileext = ".html"))
  on.exit(unlink(file.path(out_dir, tmp)), add = TRUE)
  fmt <- rmarkdown::html_document(self_contained = TRUE, mathjax = NULL, theme = NULL, highlight = NULL,
                                   css = system.file("report", "report.css", package = "dpsynthr"))
  rmarkdown::render(input, output_format = fmt, output_file = tmp, output_dir = out_dir,
                    intermediates_dir = work, knit_root_dir = work,
                    params = list(title = title, pooled = pooled, compare = compare, synthesis = synthesis),
                    envir = new.env(parent = globalenv()), quiet = quiet)
  target <- file.path(out_dir, basename(file))
  if (!file.rename(file.path(out_dir, tmp), target)) {
    stop(sprintf("could not move the report into place at '%s'", target), call. = FALSE)
  }
  invisible(target)
}

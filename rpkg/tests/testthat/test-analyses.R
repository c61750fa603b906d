# Analyses and congeniality (issue #21): R formulas reach the generator as
# strings; dp_glm()/dp_lm() warn when the synthesis' measured tables do not
# carry what the model estimates.

analysis_frames <- function(m = 4, n = 80) {
  set.seed(3)
  lapply(seq_len(m), function(i) {
    d <- data.frame(x1 = rnorm(n), x2 = rnorm(n))
    d$y <- 1 + d$x1 - d$x2 + rnorm(n)
    d
  })
}

synds_with_queries <- function(queries) {
  s <- synds_of(analysis_frames())
  s$queries <- queries
  s
}

test_that("analyses: formulas and strings become a list of formula strings", {
  expect_identical(analyses_to_py(income ~ age + race + sex), list("income ~ age + race + sex"))
  expect_identical(analyses_to_py(list(income ~ age * sex, "y ~ x")), list("income ~ age * sex", "y ~ x"))
  expect_identical(analyses_to_py(c("y ~ a", "y ~ b")), list("y ~ a", "y ~ b"))
  long <- stats::as.formula(paste("y ~", paste0("a_rather_long_predictor_name_", 1:12, collapse = " + ")))
  expect_length(analyses_to_py(long), 1L)
  expect_match(analyses_to_py(long)[[1]], "name_1 \\+ .*name_12$")
  expect_match(analyses_to_py(y ~ `hours-per-week`)[[1]], "`hours-per-week`", fixed = TRUE)
  expect_error(analyses_to_py(42), "must be a formula")
  expect_error(analyses_to_py(list(y ~ x, 3)), "each analysis must be a formula")
})

test_that("dp_synthesize passes analyses to the engine and keeps the released queries", {
  skip_if_no_engine()
  d <- data.frame(g = factor(sample(c("a", "b"), 60, TRUE)), y = factor(sample(c("no", "yes"), 60, TRUE)))
  sch <- list(g = list(type = "categorical", categories = c("a", "b")),
              y = list(type = "categorical", categories = c("no", "yes")))
  s <- dp_synthesize(d, "independent", epsilon = 1, m = 2, seed = 1, schema = sch)
  expect_identical(s$queries, list("g", "y"))
  expect_identical(s$analyses, character())
  # the engine receives analyses= (the independent generator has no such option: its error says so)
  expect_error(dp_synthesize(d, "independent", epsilon = 1, m = 2, seed = 1, schema = sch,
                             analyses = list(y ~ g)), "analyses")
})

test_that("dp_lm warns when a response-predictor pair was not measured", {
  skip_if_no_engine()
  s <- synds_with_queries(list(c("y", "x1"), c("x1", "x2")))
  w <- NULL
  fit <- withCallingHandlers(dp_lm(y ~ x1 + x2, data = s),
                             dpsynth_uncongenial_warning = function(c) {
                               w <<- c
                               invokeRestart("muffleWarning")
                             })
  expect_s3_class(w, "dpsynth_uncongenial_warning")
  expect_match(conditionMessage(w), "x2\u2013y: no measured table holds both")
  expect_match(conditionMessage(w), "analyses = list(y ~ x1 + x2)", fixed = TRUE)
  expect_identical(w$missing, fit$congeniality)
  expect_length(fit$congeniality, 1L)
  expect_true(any(grepl("UNCONGENIAL", format(fit))))
})

test_that("dp_glm is silent when the measured tables carry the model, or when queries are unknown", {
  skip_if_no_engine()
  s <- synds_with_queries(list(c("y", "x1"), c("y", "x2"), c("x1", "x2")))
  expect_no_uncongenial <- function(expr) {
    withCallingHandlers(expr, dpsynth_uncongenial_warning = function(c) stop("unexpected: ", conditionMessage(c)))
  }
  fit <- expect_no_uncongenial(dp_glm(y ~ x1 + x2, data = s))
  expect_length(fit$congeniality, 0L)
  expect_false(any(grepl("UNCONGENIAL", format(fit))))
  expect_length(expect_no_uncongenial(dp_lm(y ~ x1 + x2, data = synds_of(analysis_frames())))$congeniality, 0L)
  expect_length(expect_no_uncongenial(dp_lm(y ~ x1 + x2, data = analysis_frames()))$congeniality, 0L)
})

test_that("dp_lm warns for an interaction no measured table carries", {
  skip_if_no_engine()
  s <- synds_with_queries(list(c("y", "x1"), c("y", "x2"), c("x1", "x2")))
  expect_warning(fit <- dp_lm(y ~ x1 * x2, data = s), "x1:x2 on y", class = "dpsynth_uncongenial_warning")
  s$queries <- list(c("y", "x1", "x2"))
  fit <- withCallingHandlers(dp_lm(y ~ x1 * x2, data = s),
                             dpsynth_uncongenial_warning = function(c) stop("unexpected warning"))
  expect_length(fit$congeniality, 0L)
})

test_that("dp_report shows the uncongeniality beside the pooled table", {
  skip_if_no_engine()
  skip_if_not(requireNamespace("rmarkdown", quietly = TRUE) && rmarkdown::pandoc_available(),
              "rmarkdown and pandoc are needed for dp_report")
  s <- synds_with_queries(list(c("y", "x1"), c("x1", "x2")))
  out <- suppressWarnings(dp_report(s, y ~ x1 + x2, file = tempfile(fileext = ".html")))
  html <- paste(readLines(out, warn = FALSE), collapse = "\n")
  expect_match(html, "Uncongenial analysis", fixed = TRUE)
  expect_match(html, "x2\u2013y: no measured table holds both", fixed = TRUE)
  expect_lt(regexpr("Pooled estimates", html), regexpr("Uncongenial analysis", html))
})

test_that("print shows the analyses served and the measured tables", {
  s <- synds_with_queries(list(c("y", "x1"), c("x1", "x2")))
  s$analyses <- "y ~ x1 + x2"
  s$ledger <- structure(data.frame(epsilon = 1), total_epsilon = 1, total_delta = 0,
                        class = c("dpsynth_ledger", "data.frame"))
  out <- capture.output(print(s))
  expect_true(any(grepl("Analyses served: y ~ x1 + x2", out, fixed = TRUE)))
  expect_true(any(grepl("Measured marginal tables: 2", out, fixed = TRUE)))
})

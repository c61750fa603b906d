test_that("napsu-mq with missing = 'mar' returns completed data sets that dp_glm pools", {
  skip_if_no_engine()
  set.seed(3)
  n <- 3000
  x1 <- rbinom(n, 1, 0.5)
  x2 <- rbinom(n, 1, 0.2 + 0.6 * x1)
  y <- rbinom(n, 1, plogis(x2 - 0.5))
  x2[runif(n) < ifelse(x1 == 1, 0.6, 0.1)] <- NA  # missing at random given x1
  d <- data.frame(x1 = factor(x1, levels = 0:1), x2 = factor(x2, levels = 0:1), y = factor(y, levels = 0:1))
  lv <- list(type = "categorical", categories = c("0", "1"))
  sch <- list(x1 = lv, x2 = lv, y = lv)
  res <- suppressWarnings(dp_synthesize(d, "napsu-mq", epsilon = 3, delta = 1e-7, m = 5, seed = 1, schema = sch,
                                        queries = list(c("x1", "x2", "y")), missing = "mar", incomplete = "x2",
                                        mcmc_chains = 16L, mcmc_warmup = 100L, mcmc_draws = 100L))
  expect_true(all(vapply(res$syn, function(s) !anyNA(s), logical(1))))
  expect_match(res$missing_assumption, "MAR")
  expect_equal(unname(res$missing_share["x2"]), mean(is.na(d$x2)), tolerance = 0.05)
  expect_output(print(res), "assumption")
  completed <- mean(vapply(res$syn, function(s) mean(s$x2 == "1"), numeric(1)))
  expect_lt(abs(completed - 0.5), 0.05)  # the observed x2 has mean ~0.385
  fit <- suppressWarnings(dp_glm(y ~ x2, family = binomial, data = res))
  expect_true("x21" %in% fit$pooled$term)
})

test_that("a data.frame with NAs and its declared incomplete columns gets completed data sets by default", {
  skip_if_no_engine()
  set.seed(4)
  n <- 1500
  d <- data.frame(a = factor(sample(c("p", "q"), n, TRUE)), b = factor(sample(c("u", "v", "w"), n, TRUE)))
  d$y <- factor(ifelse(runif(n) < plogis((d$a == "q") - 0.5), "yes", "no"), levels = c("no", "yes"))
  d$b[runif(n) < ifelse(d$a == "q", 0.3, 0.05)] <- NA
  expect_error(dp_synthesize(d, "napsu-mq", epsilon = 2, delta = 1e-6, m = 2, seed = 1,
                             schema = dp_schema(d)), "'b' has missing values but is not declared")
  sch <- dp_schema(d, missing = "b")
  expect_true(isTRUE(sch$columns$b$missing) && is.null(sch$columns$a$missing))
  expect_output(print(sch), "may be missing")
  res <- suppressWarnings(dp_synthesize(d, "napsu-mq", epsilon = 2, delta = 1e-6, m = 3, seed = 1, schema = sch,
                                        analyses = y ~ a + b))
  expect_true(all(vapply(res$syn, function(s) !anyNA(s), logical(1))))
  expect_match(res$missing_assumption, "MAR")
  expect_true(any(grepl("R_j", dp_ledger(res)$step)))
  fit <- suppressWarnings(dp_glm(y ~ a + b, family = binomial, data = res))
  expect_true(all(c("aq", "bv", "bw") %in% fit$pooled$term))
  if (requireNamespace("rmarkdown", quietly = TRUE) && rmarkdown::pandoc_available()) {
    file <- tempfile(fileext = ".html")
    suppressWarnings(dp_report(res, y ~ a + b, family = binomial, file = file))
    html <- paste(readLines(file, warn = FALSE), collapse = "\n")
    expect_true(grepl("Missing values in the private data", html, fixed = TRUE))
    expect_true(grepl("missing\\s+at\\s+random[^(]*\\(MAR\\b", html))  # pandoc wraps lines
  }
})

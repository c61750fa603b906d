util_data <- function(n = 400, seed = 11) {
  set.seed(seed)
  g <- factor(sample(c("a", "b", "c"), n, TRUE), levels = c("a", "b", "c", "unused"))
  x <- ifelse(g == "a", rnorm(n, -1), rnorm(n, 1))
  x[sample(n, 20)] <- NA
  data.frame(g = g, x = x)
}
util_schema <- list(g = list(type = "categorical", categories = c("a", "b", "c", "unused")),
                    x = list(type = "numeric", lower = -5, upper = 5, bins = 10))

test_that("identical copies have zero TVD and zero pMSE", {
  skip_if_no_engine()
  real <- util_data()
  u <- dp_utility(real, synds_of(list(real, real)), schema = util_schema)
  expect_s3_class(u, "dpsynth_utility")
  expect_identical(u$measure, c("tvd_1way", "tvd_2way", "pmse", "s_pmse"))
  expect_equal(u$value, c(0, 0, 0, 0), tolerance = 1e-12)
  expect_identical(dim(attr(u, "per_dataset")), c(4L, 2L))
  expect_output(print(u), "Utility of 2 synthetic data set")
})

test_that("breaking the dependence keeps 1-way TVD at 0 but not 2-way TVD", {
  skip_if_no_engine()
  real <- util_data()
  shuffled <- real
  set.seed(1)
  shuffled$x <- sample(shuffled$x)
  for (mode in c("paper", "schema")) {
    u <- dp_utility(real, synds_of(list(shuffled, shuffled, real)), schema = util_schema, pmse = FALSE,
                    tvd_mode = mode)
    per <- attr(u, "per_dataset")
    expect_identical(rownames(per), c("tvd_1way", "tvd_2way"))
    if (mode == "schema") expect_equal(unname(per["tvd_1way", ]), c(0, 0, 0))
    expect_gt(per["tvd_2way", 1], 0.2)
    expect_equal(per["tvd_2way", 3], 0)
    expect_equal(u$value[2], mean(per["tvd_2way", ]))
    expect_equal(u$sd[2], sd(per["tvd_2way", ]))
  }
  u <- dp_utility(real, synds_of(list(shuffled, real)), schema = util_schema, k = 2)
  expect_gt(u$value[u$measure == "s_pmse"], 0)
  expect_error(dp_utility(real, synds_of(list(real, real))), "schema")
})

test_that("dp_audit reports the empirical lower bound beside the claim", {
  skip_if_no_engine()
  a <- dp_audit("independent", epsilon = 1, runs = 10, seed = 1)
  expect_s3_class(a, "dpsynth_audit")
  expect_true(all(c("eps_lo", "eps_claimed", "passed", "false_positives", "max_power") %in% names(a)))
  expect_lte(a$eps_claimed, 1 + 1e-9)
  expect_identical(a$passed, a$eps_lo <= a$claim_epsilon + 1e-9)
  expect_output(print(a), "empirical lower bound eps_lo")
  expect_error(dp_audit("no-such-method", epsilon = 1, runs = 2), "dp_audit: .*no-such-method")
  f <- tempfile(fileext = ".rds")
  saveRDS(a, f)
  expect_identical(readRDS(f), a)
})

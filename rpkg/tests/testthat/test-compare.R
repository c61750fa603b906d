test_that("synthetic copies identical to the real data compare as identical", {
  skip_if_no_engine()
  real <- make_frames(m = 1, n = 300, seed = 8)[[1]]
  fit <- dp_glm(y ~ x + g, family = binomial, data = synds_of(list(real, real, real)))
  cmp <- dp_compare(fit, real)
  expect_s3_class(cmp, "dpsynth_compare")
  tab <- cmp$table
  expect_identical(names(tab), c("term", "estimate.syn", "std.error.syn", "conf.low.syn", "conf.high.syn",
                                 "estimate.obs", "std.error.obs", "statistic.obs", "conf.low.obs",
                                 "conf.high.obs", "diff", "std.diff", "ci.overlap"))
  ref <- glm(y ~ x + g, family = binomial, data = real)
  expect_equal(tab$estimate.obs, unname(coef(ref)))
  expect_equal(tab$std.error.obs, unname(sqrt(diag(vcov(ref)))))
  expect_equal(tab$conf.low.obs, unname(confint.default(ref)[, 1]))
  # b = 0: the synthetic rule falls back to ubar, the real-data variance
  expect_equal(tab$std.diff, rep(0, 4), tolerance = 1e-9)
  expect_equal(tab$ci.overlap, rep(1, 4), tolerance = 1e-9)
  expect_equal(cmp$mean_ci_overlap, 1, tolerance = 1e-9)
  expect_identical(cmp$n_dropped, 0L)
})

test_that("std.diff and the Karr et al. (2006) overlap follow their definitions", {
  skip_if_no_engine()
  frames <- make_frames(m = 4, seed = 9)
  real <- make_frames(m = 1, n = 400, seed = 10)[[1]]
  real$x[1:7] <- NA
  fit <- dp_lm(z ~ x + g, data = synds_of(frames))
  cmp <- dp_compare(fit, real)
  tab <- cmp$table
  expect_equal(tab$std.diff, (tab$estimate.syn - tab$estimate.obs) / tab$std.error.obs)
  lo <- pmax(tab$conf.low.obs, tab$conf.low.syn)
  hi <- pmin(tab$conf.high.obs, tab$conf.high.syn)
  j <- ((hi - lo) / (tab$conf.high.obs - tab$conf.low.obs) + (hi - lo) / (tab$conf.high.syn - tab$conf.low.syn)) / 2
  expect_equal(tab$ci.overlap, j)
  # lm: t reference with the residual df for the real-data interval
  ref <- lm(z ~ x + g, data = real)
  expect_equal(tab$conf.high.obs, unname(confint(ref)[, 2]))
  expect_identical(cmp$n_used, 393L)
  expect_identical(cmp$n_dropped, 7L)
  out <- capture.output(print(cmp))
  expect_true(any(grepl("Mean confidence interval overlap", out)))
  expect_true(any(grepl("7 dropped", out)))
  expect_true(any(grepl("not differentially private", out)))
})

test_that("non-overlapping intervals give a negative overlap (the engine's compare_table)", {
  skip_if_no_engine()
  cmp <- reticulate::import("dpsynth.inference.compare", convert = FALSE)
  pooled <- data.frame(term = c("a", "b"), estimate = c(2.5, 0.5), std.error = 1, conf.low = c(2, 0),
                       conf.high = c(3, 1))
  real <- data.frame(term = c("a", "b", "c"), estimate.obs = 0.5, std.error.obs = 1, statistic.obs = 0.5,
                     conf.low.obs = c(0, NA, 0), conf.high.obs = 1)
  tab <- pandas_to_r(cmp$compare_table(r_to_pandas(pooled), r_to_pandas(real)))  # NaN comes back as NA
  expect_identical(tab$term, c("a", "b", "c"))
  expect_equal(tab$ci.overlap, c(-1, NA, NA))
  expect_equal(tab$std.diff, c(2, 0, NA))
})

test_that("dp_compare needs a model fit and a data.frame", {
  skip_if_no_engine()
  expect_error(dp_compare(dp_pool(c(1, 2), c(1, 1)), data.frame()), "dp_glm")
  fit <- dp_lm(z ~ x, data = synds_of(make_frames(m = 2)))
  expect_error(dp_compare(fit, list(z = 1)), "data.frame")
  expect_error(dp_compare(fit, data.frame(a = 1:3)), "could not be fitted to the real data")
})

test_that("the coefficient plot draws with and without the real-data comparison", {
  skip_if_no_engine()
  frames <- make_frames(m = 3, seed = 14)
  fit <- dp_glm(y ~ x + g, family = binomial, data = synds_of(frames))
  cmp <- dp_compare(fit, frames[[1]])
  f <- tempfile(fileext = ".pdf")
  pdf(f)
  expect_identical(plot(fit), fit)
  expect_identical(plot(fit, compare = cmp, intercept = TRUE), fit)
  dev.off()
  expect_gt(file.size(f), 1000)
})

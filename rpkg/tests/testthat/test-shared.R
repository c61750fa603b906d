# Language-neutral cases shared with pytest: shared_tests/cases/*.json.
find_shared_tests <- function() {
  env <- Sys.getenv("DPSYNTH_SHARED_TESTS")
  if (nzchar(env)) return(if (dir.exists(env)) normalizePath(env) else NULL)
  starts <- c(getwd(), dpsynthr:::.dp_install_dir, dirname(Sys.getenv("RETICULATE_PYTHON")))
  for (dir in starts[nzchar(starts) & dir.exists(starts)]) {
    dir <- normalizePath(dir)
    repeat {
      if (file.exists(file.path(dir, "shared_tests", "run_shared_tests.R"))) {
        return(file.path(dir, "shared_tests"))
      }
      if (dirname(dir) == dir) break
      dir <- dirname(dir)
    }
  }
  NULL
}

shared <- find_shared_tests()

test_that("shared test cases are found", {
  skip_if(is.null(shared), "shared_tests/ not found (set DPSYNTH_SHARED_TESTS)")
  skip_if_not_installed("jsonlite")
  skip_if_no_engine()
  source(file.path(shared, "run_shared_tests.R"), local = TRUE)
  expect_gt(length(shared_case_files(shared)), 0)
})

if (!is.null(shared) && requireNamespace("jsonlite", quietly = TRUE)) {
  source(file.path(shared, "run_shared_tests.R"), local = TRUE)
  for (file in shared_case_files(shared)) {
    spec <- read_shared_cases(file)
    for (case in spec$cases) {
      local({
        kind <- spec$kind
        case <- case
        test_that(sprintf("shared %s: %s (%s)", kind, case$name, basename(file)), {
          skip_if_no_engine()
          run_shared_case(kind, case)
        })
      })
    }
  }
}

test_that("every kind of shared case has an R runner (none is skipped as unknown)", {
  skip_if(is.null(shared), "shared_tests/ not found (set DPSYNTH_SHARED_TESTS)")
  skip_if_not_installed("jsonlite")
  source(file.path(shared, "run_shared_tests.R"), local = TRUE)
  kinds <- unique(vapply(shared_case_files(shared), function(f) read_shared_cases(f)$kind, ""))
  run_from_r <- c("gaussian_sigma", "cdp_rho", "cdp_eps", "schema_error", "roundtrip", "pool",
                  "congeniality", "schema_from_data")
  expect_true(all(kinds %in% run_from_r),
              label = paste("kinds without an R runner (add one to shared_tests/run_shared_tests.R):",
                            paste(setdiff(kinds, run_from_r), collapse = ", ")))
})

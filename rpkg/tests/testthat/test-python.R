test_that("a .venv is found by walking up", {
  root <- tempfile("proj")
  dir.create(file.path(root, ".venv", "bin"), recursive = TRUE)
  dir.create(file.path(root, "a", "b"), recursive = TRUE)
  file.create(file.path(root, ".venv", "bin", "python"))
  expect_equal(find_venv_python(file.path(root, "a", "b")),
               file.path(normalizePath(root), ".venv", "bin", "python"))
  expect_null(find_venv_python(""))
  unlink(root, recursive = TRUE)
})

test_that("RETICULATE_PYTHON wins", {
  old <- Sys.getenv("RETICULATE_PYTHON", unset = NA)
  on.exit(if (is.na(old)) Sys.unsetenv("RETICULATE_PYTHON") else Sys.setenv(RETICULATE_PYTHON = old))
  Sys.setenv(RETICULATE_PYTHON = "/some/python")
  expect_equal(dp_python_path(), "/some/python")
})

test_that("the error when Python is missing says what to do", {
  expect_error(dp_python_error("no Python."), "make test.*RETICULATE_PYTHON")
})

test_that("dpsynthr_sitrep reports and returns a list", {
  out <- NULL
  expect_output(out <- dpsynthr_sitrep(), "reticulate")
  expect_named(out, c("r", "reticulate", "python", "dpsynth_ok", "error", "versions"))
  expect_named(out$versions, c("dpsynth", "numpy", "pandas", "torch"))
  if (python_available()) {
    expect_true(out$dpsynth_ok)
    expect_false(is.na(out$versions[["pandas"]]))
  }
})

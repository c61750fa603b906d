# Finding Python and the dpsynth engine. Nothing here runs at load time:
# Python starts on the first call that needs it (dp_py()).

.dp_env <- new.env(parent = emptyenv())

# Evaluated when the package is installed: the source directory it was
# installed from (R CMD INSTALL runs package code from there), used to find
# the project's .venv from any working directory.
.dp_install_dir <- tryCatch(normalizePath(getwd()), error = function(e) "")

.onLoad <- function(libname, pkgname) {
  if (is.null(getOption("dpsynthr.python"))) {
    options(dpsynthr.python = find_venv_python(.dp_install_dir))
  }
}

# Walk up from `start` to the filesystem root, looking for .venv/bin/python.
find_venv_python <- function(start) {
  if (!length(start) || !nzchar(start) || !dir.exists(start)) return(NULL)
  dir <- normalizePath(start)
  repeat {
    py <- file.path(dir, ".venv", "bin", "python")
    if (file.exists(py)) return(py)
    parent <- dirname(dir)
    if (parent == dir) return(NULL)
    dir <- parent
  }
}

# The Python dpsynthr uses: RETICULATE_PYTHON; a .venv/bin/python found by walking up from the
# working directory; the option dpsynthr.python (the .venv above the install directory, set at load).
dp_python_path <- function() {
  env <- Sys.getenv("RETICULATE_PYTHON")
  if (nzchar(env)) return(env)
  py <- find_venv_python(getwd())
  if (!is.null(py)) return(py)
  opt <- getOption("dpsynthr.python")
  if (!is.null(opt) && file.exists(opt)) return(opt)
  NULL
}

dp_python_error <- function(msg) {
  stop(msg, "\nRun `make test` in the dpsynth project (it builds .venv with the engine), ",
       "or set RETICULATE_PYTHON to a Python that can `import dpsynth`.", call. = FALSE)
}

dp_init_python <- function() {
  if (isTRUE(.dp_env$initialised)) return(invisible(TRUE))
  if (reticulate::py_available(initialize = FALSE)) {
    # Python already started in this session (e.g. by the user): use it.
    .dp_env$initialised <- TRUE
    return(invisible(TRUE))
  }
  py <- dp_python_path()
  if (is.null(py)) dp_python_error("dpsynthr could not find Python (no RETICULATE_PYTHON, no .venv).")
  tryCatch(reticulate::use_python(py, required = TRUE),
           error = function(e) dp_python_error(paste0("dpsynthr could not use Python at ", py,
                                                      ": ", conditionMessage(e))))
  .dp_env$initialised <- TRUE
  invisible(TRUE)
}

# The engine module (convert = FALSE), imported once and cached. If it is
# not installed in the environment but the project's python/ directory sits
# beside the .venv, that directory is put on sys.path.
dp_py <- function() {
  if (!is.null(.dp_env$dpsynth)) return(.dp_env$dpsynth)
  dp_init_python()
  mod <- tryCatch(reticulate::import("dpsynth", convert = FALSE), error = function(e) {
    src <- file.path(dirname(dirname(dirname(reticulate::py_config()$python))), "python")
    if (!file.exists(file.path(src, "dpsynth", "__init__.py"))) {
      dp_python_error(paste0("Python found but `import dpsynth` failed: ", conditionMessage(e)))
    }
    reticulate::import("sys", convert = FALSE)$path$insert(0L, src)
    tryCatch(reticulate::import("dpsynth", convert = FALSE), error = function(e2)
      dp_python_error(paste0("Python found but `import dpsynth` failed: ", conditionMessage(e2))))
  })
  .dp_env$dpsynth <- mod
  mod
}

# TRUE if the engine and its converter (dpsynth.bridge: r_to_pandas/pandas_to_r) can be imported;
# used by tests and examples to skip.
python_available <- function() tryCatch(!is.null(dp_bridge()), error = function(e) FALSE)
pandas_available <- python_available

# dpsynthr_sitrep(): documented in man/dpsynthr_sitrep.Rd
dpsynthr_sitrep <- function() {
  py <- dp_python_path()
  res <- if (is.null(py)) NA_character_ else tryCatch({ dp_py(); TRUE }, error = function(e) conditionMessage(e))
  ok <- isTRUE(res)
  versions <- c(dpsynth = NA_character_, numpy = NA_character_, pandas = NA_character_, torch = NA_character_)
  if (isTRUE(.dp_env$initialised)) {
    meta <- reticulate::import("importlib.metadata")
    versions[] <- vapply(names(versions), function(m) tryCatch(meta$version(m), error = function(e) NA_character_), "")
    if (ok && is.na(versions[["dpsynth"]])) versions[["dpsynth"]] <- reticulate::py_to_r(dp_py()$`__version__`)
    py <- reticulate::py_config()$python
  }
  out <- list(r = R.version$version.string, reticulate = as.character(utils::packageVersion("reticulate")),
              python = py %||% NA_character_, dpsynth_ok = ok, error = if (ok) NA_character_ else res,
              versions = versions)
  cat("dpsynthr situation report\n", sprintf("  %-11s %s\n", c("R:", "reticulate:", "Python:", "engine:",
                                                              paste0(names(versions), ":")),
                                             c(out$r, out$reticulate, if (is.null(py)) "not found" else py,
                                               if (ok) "dpsynth imports" else paste("dpsynth does NOT import:", res),
                                               ifelse(is.na(versions), "-", versions))), sep = "")
  invisible(out)
}

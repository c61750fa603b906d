skip_if_no_pandas <- function() {
  skip_if_not(pandas_available(), "Python with pandas not found (set RETICULATE_PYTHON)")
}

skip_if_no_engine <- function() {
  skip_if_not(python_available(), "the dpsynth engine is not importable (set RETICULATE_PYTHON to a Python that can `import dpsynth`, e.g. .venv/bin/python)")
}

roundtrip <- function(df) pandas_to_r(r_to_pandas(df))

py_str <- function(x) reticulate::py_to_r(reticulate::import_builtins(convert = FALSE)$str(x))

# m data.frames from one logistic model (a stand-in for synthetic data sets:
# the pooling code does not care where they come from).
make_frames <- function(m = 5, n = 200, seed = 1) {
  set.seed(seed)
  lapply(seq_len(m), function(i) {
    x <- rnorm(n)
    g <- factor(sample(c("a", "b", "c"), n, TRUE), levels = c("a", "b", "c"))
    y <- rbinom(n, 1, plogis(-0.5 + x + (g == "b")))
    data.frame(y = factor(y, levels = 0:1, labels = c("no", "yes")), x = x, g = g,
               z = 1 + 2 * x + rnorm(n), w = runif(n, 0.5, 1.5))
  })
}

# A dpsynth_synds object around given data.frames (no Python involved).
synds_of <- function(frames, method = "test") {
  structure(list(syn = frames, m = length(frames), method = method,
                 call = quote(dp_synthesize(data = d, method = "test", epsilon = 1)),
                 epsilon = 1, delta = NULL, seed = 1, ledger = NULL),
            class = "dpsynth_synds")
}

import sys, time, warnings
import numpy as np
import dpsynth
from dpsynth.generators.napsu import NAPSUMQ, adult_reduced
df, schema = dpsynth.load_dataset("adult")
d, s = adult_reduced(df, schema)
d, s = d.dropna().reset_index(drop=True), s.declare_missing([])
seed = int(sys.argv[1])
t0 = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    gen = NAPSUMQ(float(sys.argv[2]) if len(sys.argv) > 2 else 1.0, 1 / len(d) ** 2, analyses=["income ~ age + race + sex"]).fit(d, s, seed=seed)
t1 = time.perf_counter()
res = gen.sample(m=20, seed=seed + 1)
t2 = time.perf_counter()
print("fit", round(t1 - t0, 1), "sample", round(t2 - t1, 1))
print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in gen.diagnostics_.items() if not isinstance(v, (dict, list, np.ndarray))})

import time, warnings, sys, cProfile, pstats
import numpy as np
import dpsynth
from dpsynth.generators.napsu import NAPSUMQ, adult_reduced
df, schema = dpsynth.load_dataset("adult")
d, s = adult_reduced(df, schema)
d = d.dropna().reset_index(drop=True)
s = s.declare_missing([])
dm = dpsynth.missing.ampute(d, sys.argv[1] if len(sys.argv) > 1 else "MCAR", p=0.2, seed=10_000, schema=s)
inc = [c for c in dm.columns if dm[c].isna().any()]
print("incomplete", inc, "rate", dm.isna().to_numpy().mean())
gen = NAPSUMQ(1.0, 1 / len(d) ** 2, analyses=["income ~ age + race + sex"], missing="mar", incomplete=inc)
pr = cProfile.Profile()
t0 = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pr.enable(); gen.fit(dm, s, seed=0); pr.disable()
t1 = time.perf_counter()
res = gen.sample(m=20, seed=1)
t2 = time.perf_counter()
print("fit", round(t1 - t0, 1), "sample", round(t2 - t1, 1))
print({k: v for k, v in gen.diagnostics_.items() if not isinstance(v, (dict, list, np.ndarray))})
print(gen.selected_queries_)
pstats.Stats(pr).sort_stats("cumulative").print_stats(25)

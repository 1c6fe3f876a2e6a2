"""Live serving machinery: start a real inference server, check it answers, benchmark it.

Modules: `server` (process lifecycle), `transformers_serve` and `sglang` (command builders), `client`
(the load generator and bench_serving-style metrics), `classify` (ok / nan / crash / ... per
attempt), `tiny_model` (random-weight models built at run time), `sweep` (resumable sweeps and
attempt matrices), `live` (engines, variants and server specs), `experiments` (what each serving chapter
runs live). The chapters' parameter specs, tables and the figures their prose cites are in
helpers.chapters (nan_crash, baselines_tuning, moe_runners).
"""

#!/usr/bin/env python3
"""The lab's scenario suite (crates/lab/inputs/scenarios/): calibrate each scenario's load, run every
config on every scenario and seed, and write the table and chart into BENCHMARKS.md.

    scripts/scenarios.py calibrate [SCENARIO ...]   # finds and writes each file's rate_scale
    scripts/scenarios.py run [--seeds 1-10] [--oracle-seeds 1-3] [--write]

Why a calibration step: a routing comparison says little at a load where every config meets the SLO or
none can. `calibrate` bisects each scenario's `rate_scale` until the *default* profile's mean SLO
attainment over the calibration seeds (101-105: never the reported ones) lies in 70-85%, and writes it
into the file. Nothing but the default profile is run to choose it.

Why two halves: `split: tuning` scenarios are the only ones any parameter may be chosen on; `held-out`
ones are reported separately and show whether a choice generalises.

The oracle (crates/lab/src/oracle.rs) plays every replica forward for every request, so it costs ~20x a
config's run; it runs on --oracle-seeds only, and its column says how many seeds it has.

Standard library only; needs a release build of epp-lab (cargo build --release -p epp-lab).
"""

import argparse
import concurrent.futures
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "crates/lab/inputs/scenarios"
BENCHMARKS = ROOT / "BENCHMARKS.md"
CHART = ROOT / "docs/scenarios.svg"
BEGIN, END = "<!-- scenarios:begin -->", "<!-- scenarios:end -->"
CALIBRATION_SEEDS = range(101, 106)
TARGET = (0.70, 0.85)

# The columns of the suite: (column name, lab argument, config path or baseline).
CONFIGS = [
    ("default", "--baselines", "default"),
    ("recommended", "--config", "config/predicted-latency-epp.yaml"),
    ("recommended+slo", "--slo-config", "config/predicted-latency-epp.yaml"),
    ("design", "--config", "config/predicted-latency-design.yaml"),
    ("llm-d-slo+slo", "--slo-config", "config/predicted-latency-slo.yaml"),
]
ORACLE = ("oracle", "--baselines", "oracle")
# The predictor's objective per column (epp's --latency-objective-type); the others run llm-d's mean. The
# recommended profile runs with log-mean, as the chart starts it (config/predicted-latency-epp.yaml).
OBJECTIVES = {"recommended": "log-mean", "recommended+slo": "log-mean"}


def lab_binary():
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    lab = Path(os.environ.get("LAB", target / "release/epp-lab"))
    if not lab.exists():
        sys.exit(f"scenarios.py: {lab} missing (cargo build --release -p epp-lab)")
    return lab


def seed_range(text):
    if text == "none":
        return range(0)
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"seeds must be N or N-M, got {text!r}")
    first, last = int(m.group(1)), int(m.group(2) or m.group(1))
    if first < 1 or last < first:
        raise argparse.ArgumentTypeError(f"seeds must be N or N-M with 1 <= N <= M, got {text!r}")
    return range(first, last + 1)


def scenario_files(names):
    if names:
        return [Path(n) if Path(n).exists() else SCENARIOS / f"{n}.yaml" for n in names]
    return sorted(SCENARIOS.glob("*.yaml"))


def split_of(path):
    m = re.search(r"^split: (\S+)$", path.read_text(), re.M)
    return m.group(1) if m else "?"


def lab_run(lab, scenario, seed, columns, rate_scale=None):
    """Runs one lab comparison (one epp-lab per latency objective); returns {column name: run report}."""
    groups = {}
    for column in columns:
        groups.setdefault(OBJECTIVES.get(column[0], "mean"), []).append(column)
    reports = {}
    for objective, group in groups.items():
        reports.update(lab_run_with(lab, scenario, seed, group, objective, rate_scale))
    return {name: reports[name] for name, _, _ in columns}


def lab_run_with(lab, scenario, seed, columns, objective, rate_scale):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        cmd = [str(lab), "--scenario", str(scenario), "--seed", str(seed), "--jobs", "1", "--json", str(out),
               "--latency-objective-type", objective]
        if rate_scale is not None:
            cmd += ["--rate-scale", f"{rate_scale:.6g}"]
        for _, flag, value in columns:
            cmd += [flag, str(ROOT / value) if flag != "--baselines" else value]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"scenarios.py: {' '.join(cmd)} failed:\n{done.stderr}")
        runs = {r["name"]: r for r in json.loads(out.read_text())["runs"]}
    return {name: runs[lab_name(flag, value)] for name, flag, value in columns}


def lab_name(flag, value):
    """The column name epp-lab gives a config file or baseline."""
    if flag == "--baselines":
        return value
    return Path(value).stem + ("+slo" if flag == "--slo-config" else "")


def parallel(jobs, tasks):
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda t: t[0](*t[1:]), tasks))


def calibrate(args):
    lab = lab_binary()
    for path in scenario_files(args.scenarios):
        lo, hi, scale = None, None, 1.0
        for _ in range(args.iterations):
            reports = parallel(args.jobs, [(lab_run, lab, path, s, [CONFIGS[0]], scale) for s in CALIBRATION_SEEDS])
            attainment = statistics.mean(r["default"]["slo_attainment"] for r in reports)
            print(f"{path.stem}: rate_scale {scale:.4g} -> default attainment {attainment:.3f}", file=sys.stderr)
            if TARGET[0] <= attainment <= TARGET[1]:
                break
            if attainment > TARGET[1]:
                lo = scale
                scale = scale * 1.6 if hi is None else (scale + hi) / 2
            else:
                hi = scale
                scale = scale / 1.6 if lo is None else (scale + lo) / 2
        else:
            sys.exit(f"scenarios.py: {path.stem}: no rate_scale in {args.iterations} steps gives 70-85%")
        text = path.read_text()
        current = re.search(r"^rate_scale: (\S+)$", text, re.M)
        line = f"rate_scale: {scale * float(current.group(1) if current else 1):.4g}"
        text, n = re.subn(r"^rate_scale: .*$", line, text, count=1, flags=re.M)
        if n != 1:
            sys.exit(f"scenarios.py: {path}: no 'rate_scale:' line to write")
        path.write_text(text)
        print(f"{path.stem}: {line} (default {attainment:.1%} over seeds "
              f"{CALIBRATION_SEEDS.start}-{CALIBRATION_SEEDS.stop - 1})")


def summarise(runs, seeds=None):
    """Mean over seeds of the figures the table shows, and each seed's attainment (for paired gaps)."""
    def mean(key, sub=None):
        values = [(r[key][sub] if sub else r[key]) for r in runs if r.get(key) is not None]
        return statistics.mean(values) if values else None
    return {
        "seeds": len(runs),
        "attainment": mean("slo_attainment"),
        "attainment_sd": statistics.stdev([r["slo_attainment"] for r in runs]) if len(runs) > 1 else 0.0,
        "ttft_p90": mean("ttft_s", "p90"),
        "e2e_p90": mean("e2e_s", "p90"),
        "tpot_p90": mean("tpot_s", "p90"),
        "rejected": mean("rejected_429"),
        "ttft_mape": mean("predictor", "ttft_heldout_mape") if all(r.get("predictor") for r in runs) else None,
        "tpot_mape": mean("predictor", "tpot_heldout_mape") if all(r.get("predictor") for r in runs) else None,
        "by_seed": {str(s): r["slo_attainment"] for s, r in zip(seeds or [], runs)},
    }


def oracle_gap(cols, name):
    """The column's attainment minus the oracle's, over the oracle's seeds only (paired: the spread between
    seeds is far larger than between routers), or None without per-seed figures for them."""
    oracle = cols.get("oracle", {}).get("by_seed") or {}
    mine = cols.get(name, {}).get("by_seed") or {}
    if not oracle or any(seed not in mine for seed in oracle):
        return None
    return statistics.mean(mine[seed] - oracle[seed] for seed in oracle)


def heterogeneous(path):
    """More than one accelerator profile in the scenario's fleet."""
    return len(set(re.findall(r"profile: ([\w.-]+)", path.read_text()))) > 1


def run(args):
    if args.from_json:
        try:
            table = json.loads(Path(args.from_json).read_text())
        except (OSError, ValueError) as e:
            sys.exit(f"scenarios.py: --from-json {args.from_json}: {e}")
        finish(table, args, [n for n in next(iter(table.values())) if n not in META + (ORACLE[0],)])
        return
    lab = lab_binary()
    files = [p for p in scenario_files(args.scenarios) if args.split in (None, split_of(p))]
    columns = list(CONFIGS)
    for flag, paths in (("--config", args.extra), ("--slo-config", args.extra_slo)):
        for path in paths:
            columns.append((lab_name(flag, path), flag, path))
    tasks = [(lab_run, lab, p, s, columns) for p in files for s in args.seeds]
    tasks += [(lab_run, lab, p, s, [ORACLE]) for p in files for s in args.oracle_seeds]
    reports = parallel(args.jobs, tasks)
    results = {}
    for (_, _, path, seed, task_columns), report in zip(tasks, reports):
        for name, _, _ in task_columns:
            meta = {"split": split_of(path), "heterogeneous": heterogeneous(path)}
            results.setdefault(path.stem, meta).setdefault(name, []).append((seed, report[name]))
    table = {
        s: {k: (v if k in META else summarise([r for _, r in v], [seed for seed, _ in v])) for k, v in cols.items()}
        for s, cols in results.items()
    }
    out = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "scenarios.json"
    out.write_text(json.dumps(table, indent=1))
    print(f"scenarios.py: wrote {out} (re-render with --from-json)", file=sys.stderr)
    finish(table, args, [c[0] for c in columns])


META = ("split", "heterogeneous")


def finish(table, args, names):
    text = render(table, args, names + [ORACLE[0]])
    print(text)
    if args.write:
        write_benchmarks(text)
        CHART.write_text(chart(table))
        print(f"scenarios.py: wrote BENCHMARKS.md and {CHART.relative_to(ROOT)}", file=sys.stderr)


def seeds_text(seeds):
    return "none" if len(seeds) == 0 else f"{seeds.start}-{seeds.stop - 1}"


def pct(v):
    return "–" if v is None else f"{100 * v:.1f}"


def render(table, args, names):
    lines = [
        f"Command: `scripts/scenarios.py run --seeds {args.seeds.start}-{args.seeds.stop - 1} --oracle-seeds "
        f"{seeds_text(args.oracle_seeds)}` (means over seeds; the oracle over its own "
        "seeds). Configs: `recommended` = config/predicted-latency-epp.yaml, `design` = "
        "config/predicted-latency-design.yaml, `llm-d-slo` = config/predicted-latency-slo.yaml; `+slo` = every "
        "request carries the scenario's SLO as x-llm-d-slo-* headers.",
        "",
    ]
    for split in ("tuning", "held-out"):
        rows = [(s, cols) for s, cols in table.items() if cols["split"] == split]
        if not rows:
            continue
        lines += [f"**{split}** — SLO attainment %, mean over seeds (in brackets: the gap to the oracle in points, "
                  "over the oracle's seeds only); TTFT p90 and E2E p90 as a ratio of the default's", ""]
        lines.append("| scenario | " + " | ".join(names) + " | recommended TTFT p90 | recommended E2E p90 |")
        lines.append("|---|" + "---:|" * (len(names) + 2))
        for scenario, cols in rows:
            cells = []
            for n in names:
                a, g = cols.get(n, {}).get("attainment"), oracle_gap(cols, n)
                gap = "" if a is None or g is None or n == "oracle" else f" ({100 * g:+.1f})"
                cells.append(pct(a) + gap)
            d, r = cols["default"], cols["recommended"]
            ratio = lambda k: "–" if not d.get(k) or r.get(k) is None else f"{r[k] / d[k]:.2f}x"
            lines.append(f"| {scenario} | " + " | ".join(cells) + f" | {ratio('ttft_p90')} | {ratio('e2e_p90')} |")
        lines.append("")
        lines += targets(rows) + [""]
    lines += ["Predictor held-out MAPE of the recommended profile (TTFT / TPOT %):", ""]
    lines.append("| scenario | split | TTFT | TPOT |")
    lines.append("|---|---|---:|---:|")
    for scenario, cols in table.items():
        r = cols["recommended"]
        lines.append(f"| {scenario} | {cols['split']} | {pct(r['ttft_mape'])} | {pct(r['tpot_mape'])} |")
    lines += ["", "![SLO attainment per scenario](docs/scenarios.svg)"]
    return "\n".join(lines)


def targets(rows):
    """Issue 17's done-when, counted over one half of the suite."""
    def att(cols, name):
        return cols.get(name, {}).get("attainment")
    n = len(rows)
    at_least = sum(att(c, "recommended") >= att(c, "default") for _, c in rows)
    hetero = [(s, c) for s, c in rows if c.get("heterogeneous")]
    plus5 = sum(att(c, "recommended") >= att(c, "default") + 0.05 for _, c in hetero)
    both = sum(c["recommended"]["ttft_p90"] <= 0.8 * c["default"]["ttft_p90"]
               and c["recommended"]["e2e_p90"] <= c["default"]["e2e_p90"] for _, c in rows)
    slo = [att(c, "recommended+slo") - att(c, "recommended") for _, c in rows if att(c, "recommended+slo") is not None]
    oracle = [oracle_gap(c, "recommended") for _, c in rows]
    oracle = [g for g in oracle if g is not None]
    near = sum(g >= -0.05 for g in oracle)
    line = (f"Targets, recommended vs default: attainment ≥ the default's on {at_least} of {n}; ≥ the default's "
            f"+ 5 points on {plus5} of {len(hetero)} heterogeneous; TTFT p90 ≤ 0.8× and E2E p90 ≤ 1.0× on "
            f"{both} of {n}")
    if slo:
        line += f"; with SLO headers {100 * min(slo):+.1f} to {100 * max(slo):+.1f} points against without"
    if oracle:
        line += f"; within 5 points of the oracle on {near} of {len(oracle)}"
    return [line + "."]


def write_benchmarks(text):
    doc = BENCHMARKS.read_text()
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in doc and END in doc:
        doc = doc[: doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):]
    else:
        doc += f"\n## 7. The scenario suite\n\n{block}\n"
    BENCHMARKS.write_text(doc)


def chart(table):
    """A grouped bar chart of SLO attainment per scenario and config, as plain SVG."""
    names = [c[0] for c in CONFIGS] + [ORACLE[0]]
    colours = ["#888888", "#1f77b4", "#6baed6", "#2ca02c", "#ff7f0e", "#111111"]
    scenarios = list(table)
    bar, gap, left, top, height = 9, 14, 60, 30, 220
    group = bar * len(names) + gap
    width = left + group * len(scenarios) + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + 150}" '
           'font-family="sans-serif" font-size="10">',
           f'<text x="{left}" y="16" font-size="12">SLO attainment (%) per scenario: mean over seeds</text>']
    for pct_mark in range(0, 101, 20):
        y = top + height - height * pct_mark / 100
        out.append(f'<line x1="{left}" x2="{width - 10}" y1="{y}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 3}" text-anchor="end">{pct_mark}</text>')
    for i, scenario in enumerate(scenarios):
        x0 = left + i * group
        for j, name in enumerate(names):
            a = table[scenario].get(name, {}).get("attainment")
            if a is None:
                continue
            h = height * a
            out.append(f'<rect x="{x0 + j * bar}" y="{top + height - h:.1f}" width="{bar - 1}" height="{h:.1f}" '
                       f'fill="{colours[j]}"><title>{scenario} {name}: {100 * a:.1f}%</title></rect>')
        label = scenario + (" (held-out)" if table[scenario]["split"] == "held-out" else "")
        out.append(f'<text transform="translate({x0 + 4},{top + height + 8}) rotate(60)">{label}</text>')
    for j, name in enumerate(names):
        x = left + j * 110
        out.append(f'<rect x="{x}" y="{top + height + 130}" width="10" height="10" fill="{colours[j]}"/>')
        out.append(f'<text x="{x + 14}" y="{top + height + 139}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("calibrate", help="find and write each scenario's rate_scale")
    c.add_argument("scenarios", nargs="*")
    c.add_argument("--iterations", type=int, default=12)
    r = sub.add_parser("run", help="run every config on every scenario and seed")
    r.add_argument("scenarios", nargs="*")
    r.add_argument("--seeds", type=seed_range, default=range(1, 11))
    r.add_argument("--oracle-seeds", type=seed_range, default=range(1, 4))
    r.add_argument("--write", action="store_true", help="write the table into BENCHMARKS.md and the chart")
    r.add_argument("--from-json", metavar="PATH", help="re-render a table scenarios.py wrote, running nothing")
    r.add_argument("--split", choices=["tuning", "held-out"], help="only this half of the suite")
    r.add_argument("--extra", action="append", default=[], metavar="CONFIG", help="another config column")
    r.add_argument("--extra-slo", action="append", default=[], metavar="CONFIG",
                   help="another config column, run with SLO headers")
    for p in (c, r):
        p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    calibrate(args) if args.command == "calibrate" else run(args)


if __name__ == "__main__":
    main()

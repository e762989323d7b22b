#!/usr/bin/env python3
"""Draws the soak's CSV (target/soak/soak.csv, written by `make soak`) as one PNG: epp's RSS, the
/metrics page size, and errors per 10 s window, with the fault windows shaded.

usage: scripts/plot-soak.py [CSV] [PNG]   (matplotlib: `make soak` installs it into .venv)
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    source = sys.argv[1] if len(sys.argv) > 1 else "target/soak/soak.csv"
    target = sys.argv[2] if len(sys.argv) > 2 else "target/soak/soak.png"
    with open(source, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot-soak: {source} has no rows")
    minutes = [int(r["seconds"]) / 60 for r in rows]
    rss = [int(r["rss_kib"]) / 1024 for r in rows]
    page = [int(r["metrics_bytes"]) / 1024 for r in rows]
    errors = [int(r["errors"]) for r in rows]
    shed = [int(r.get("shed") or 0) for r in rows]
    requests = [int(r["requests"]) for r in rows]

    has_load = "load1" in rows[0]
    fig, axes = plt.subplots(3 if has_load else 2, 1, figsize=(10, 8 if has_load else 6), sharex=True)
    ax_rss, ax_err = axes[0], axes[1]
    if has_load:
        # Other work on a shared machine shows here, beside the errors it may cause.
        axes[2].plot(minutes, [float(r["load1"]) for r in rows], color="tab:olive", label="1-min load average")
        axes[2].set_ylabel("load")
        axes[2].set_ylim(bottom=0)
        axes[2].legend(loc="upper left")
    ax_rss.plot(minutes, rss, color="tab:blue", label="epp RSS (MiB)")
    ax_rss.set_ylabel("RSS (MiB)")
    ax_rss.set_ylim(bottom=0)
    ax_page = ax_rss.twinx()
    ax_page.plot(minutes, page, color="tab:green", linestyle="--", label="/metrics (KiB)")
    ax_page.set_ylabel("/metrics (KiB)")
    ax_page.set_ylim(bottom=0)
    ax_rss.legend(loc="upper left")
    ax_page.legend(loc="upper right")
    if rows and "five_xx" in rows[0]:
        # The error kinds stacked: 5xx, transport errors and timeouts, bodies cut after the status.
        bottom = [0] * len(rows)
        for column, color, label in (
            ("five_xx", "tab:red", "5xx per 10 s"),
            ("transport", "tab:brown", "transport errors / timeouts"),
            ("cut", "tab:pink", "cut bodies"),
        ):
            values = [int(r[column]) for r in rows]
            ax_err.bar(minutes, values, width=0.12, bottom=bottom, color=color, label=label)
            bottom = [b + v for b, v in zip(bottom, values)]
    else:
        ax_err.bar(minutes, errors, width=0.12, color="tab:red", label="errors per 10 s")
    if any(shed):
        ax_err.bar(minutes, shed, width=0.12, bottom=errors, color="tab:purple", label="shed by the load generator")
    ax_err.legend(loc="upper left")
    ax_err.set_ylabel("errors / 10 s")
    ax_req = ax_err.twinx()
    ax_req.plot(minutes, requests, color="tab:gray", linewidth=0.8, label="requests per 10 s")
    ax_req.set_ylabel("requests / 10 s")
    ax_req.set_ylim(bottom=0)
    for ax in axes:
        for r, m in zip(rows, minutes):
            if r["fault"]:
                ax.axvspan(m - 10 / 60, m, color="orange", alpha=0.15, linewidth=0)
    axes[-1].set_xlabel("minutes (orange: a fault is active)")
    fig.suptitle("epp soak through Envoy: open loop below the measured maximum, a fault every 2 minutes")
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    print(f"plot-soak: wrote {target}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Checks the Helm chart in deploy/helm/epp without a cluster or a helm binary.

For each value set (scripts/helm_check/cases.py) it renders the chart with helm-python-sdk (Helm v4's own
template engine and values-schema check, through its C library), validates every manifest strictly (an
unknown field is an error) against the Kubernetes OpenAPI schemas of 1.27 (the chart's floor) and of the
newest version the pinned kubernetes-validate ships, custom resources against strict CRD subsets
(deploy/helm/check/crd-subsets.yaml), and asserts what the chart promises (scripts/helm_check/facts.py):
flags, probes, ports, the config, security, resources, the image, RBAC rules exactly the API calls of the
mode (the list in deploy/helm/epp/api-calls.yaml, which tests/discovery/rbac.rs checks epp's real calls
against), the InferencePool, the in-process latency predictor (upstream's
inferenceExtension.latencyPredictor.enabled gives the predicted-latency-epp config, a model volume and the
mapped training env; off, the default config is unchanged). Upstream-layout values are rendered too, some
from `helm upgrade --install --set ...` expressions parsed by Helm's own --set parser. Refused value sets
must fail with their message. Given a debug build of epp, epp is started with each rendered argument
list, config and plain env (ports 0, paths moved to a temp dir) and must reach "epp serving" and exit
cleanly on SIGTERM; and a mapped training setting epp rejects must stop it, naming the flag.

Usage:  make helm-check            (installs helm-python-sdk and kubernetes-validate into .venv first)
        .venv/bin/python scripts/helm-check.py [-v]
Env:    EPP_BIN=path/to/epp        epp for the start-up check (default: $CARGO_TARGET_DIR or target/, debug/)
        HELM_CHECK_REQUIRE_EPP=1   a missing epp binary fails the check instead of skipping that part
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import helm_python as helm
import yaml

from helm_check.cases import CASES, EXAMPLES, REFUSED
from helm_check.common import CHART, KUBE_VERSIONS, NAMESPACE, RELEASE, ROOT, CheckFailed, expect
from helm_check.epp import find_epp, start_epp
from helm_check.facts import check_case
from helm_check.render import render, validate_schemas

VERBOSE = "-v" in sys.argv[1:]

# A mapped training setting epp must reject at start-up (proof that the chart's env reaches its flags).
BAD_PREDICTOR_SETTING = ({"inferenceExtension": {"latencyPredictor": {
    "enabled": True, "trainingServer": {"config": {"LATENCY_QUANTILE_ALPHA": "1.5"}}}}},
    "--latency-quantile-alpha")


def static_checks(app_version):
    for example in EXAMPLES:
        chart_copy = (CHART / "configs" / f"{example}.yaml").read_bytes()
        expect(chart_copy == (ROOT / "config" / f"{example}.yaml").read_bytes(),
               f"deploy/helm/epp/configs/{example}.yaml differs from config/{example}.yaml")
    shipped = sorted(p.stem for p in (CHART / "configs").glob("*.yaml"))
    expect(shipped == sorted(EXAMPLES), f"chart examples {shipped} != {sorted(EXAMPLES)}")
    cargo = re.search(r'(?m)^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text()).group(1)
    expect(app_version == cargo, f"Chart appVersion {app_version} != Cargo.toml version {cargo}")
    for version in KUBE_VERSIONS:
        report = helm.lint(str(CHART), strict=True, kube_version=f"v{version}", namespace=NAMESPACE)
        problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
        expect(not problems, f"helm lint (k8s {version}): {problems}")


def render_and_check(chart, values, app_version):
    rendered = render(chart, values)
    notes = rendered.pop("NOTES", "")
    docs = [d for path in sorted(rendered) for d in rendered[path]]
    validate_schemas(docs)
    result = check_case(docs, notes, chart.merge_values(values), app_version)
    if VERBOSE:
        print(yaml.safe_dump_all(docs, sort_keys=False))
    return result


def main():
    started = time.monotonic()
    failures, checked = [], []

    def run(name, label, fn):
        checked.append(name)
        try:
            note = fn()
            print(f"  ok    {name}: {label}{note or ''}")
        except (CheckFailed, helm.HelmError, subprocess.SubprocessError, OSError) as e:
            failures.append(name)
            print(f"  FAIL  {name}: {label}: {e}")

    epp_bin = find_epp()
    have_epp = epp_bin.is_file() and os.access(epp_bin, os.X_OK)
    if not have_epp:
        message = f"no epp binary at {epp_bin} (cargo build --bin epp, or EPP_BIN=)"
        if os.environ.get("HELM_CHECK_REQUIRE_EPP") == "1":
            checked.append("epp binary")
            failures.append("epp binary")
            print(f"  FAIL  {message}")
        else:
            print(f"  skip  start-up check: {message}")
    have_openssl = shutil.which("openssl") is not None

    with helm.Chart.load(str(CHART)) as chart, tempfile.TemporaryDirectory(prefix="helm-check-") as workdir:
        app_version = chart.metadata["appVersion"]
        run("chart", f"examples match config/, appVersion = Cargo.toml, helm lint --strict "
            f"(k8s {', '.join(KUBE_VERSIONS)})", lambda: static_checks(app_version))
        for name, values in CASES.items():
            def one_case(name=name, values=values):
                args, config_text, plain_env = render_and_check(chart, values, app_version)
                if not have_epp:
                    return None
                if "--cert-path" in args and not have_openssl:
                    return " (no openssl for a test certificate: epp not started)"
                start_epp(epp_bin, name, args, config_text, plain_env, workdir)
                return ", epp starts with the rendered args, config and env and stops on SIGTERM"
            label = f"strict schemas (k8s {', '.join(KUBE_VERSIONS)}), chart facts"
            run(f"values {name}", label, one_case)
        for name, (values, message) in REFUSED.items():
            def refused(values=values, message=message):
                try:
                    chart.render(values=values, name=RELEASE, namespace=NAMESPACE)
                except helm.HelmError as e:
                    expect(message in str(e), f"refused, but with {str(e)!r}")
                    return
                raise CheckFailed("rendered; should have been refused")
            run(f"refused {name}", f"fails with {message!r}", refused)
        if have_epp:
            def bad_setting():
                values, flag = BAD_PREDICTOR_SETTING
                args, config_text, plain_env = render_and_check(chart, values, app_version)
                try:
                    start_epp(epp_bin, "bad predictor setting", args, config_text, plain_env, workdir)
                except CheckFailed as e:
                    expect("epp exited" in str(e) and flag in str(e), f"failed otherwise: {e}")
                    return
                raise CheckFailed("epp started; the mapped LATENCY_QUANTILE_ALPHA=1.5 did not reach it")
            run("epp reads the mapped training env", f"LATENCY_QUANTILE_ALPHA=1.5 stops epp naming {BAD_PREDICTOR_SETTING[1]}",
                bad_setting)

    elapsed = time.monotonic() - started
    total = len(checked)
    if failures:
        print(f"helm-check: {len(failures)} of {total} checks FAILED ({elapsed:.1f} s): {', '.join(failures)}")
        return 1
    print(f"helm-check: all {total} checks passed ({elapsed:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs the epp image the way the Helm chart's Deployment runs it, and routes a request through it
(make image-check, after make image; .ci/run runs both).

1. The image: entrypoint /epp (the chart sets only `args`), user 65532:65532, the chart's ports exposed;
   `--version` answers.
2. The chart rendered (helm-python-sdk) for one real llama.cpp server as its static endpoint, with a config
   that reads llama.cpp's metrics. The epp container runs with exactly the rendered args, ConfigMap mount
   and security context: `--user` from runAsUser/runAsGroup, `--read-only` from readOnlyRootFilesystem,
   `--cap-drop ALL`, `no-new-privileges` from allowPrivilegeEscalation: false, emptyDir volumes as tmpfs.
   Host networking (no CNI here), so the rendered ports are moved to free ones, consistently.
3. Envoy (deploy/envoy/envoy-full-duplex.yaml as shipped: TLS to epp, plaintext gRPC health checks on the
   chart's health port) in front: a completion through it is served by llama.cpp, Envoy sees epp's health
   service SERVING, and epp counts the request.
4. `podman stop` (SIGTERM) ends epp with status 0.

What a cluster would add: the kubelet's own gRPC probes, a pod network, the ServiceAccount's token.
"""
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import helm_python as helm  # noqa: E402  (helm-check's dependency, in .venv)

from helm_check.common import CHART, ROOT, CheckFailed, expect  # noqa: E402
from helm_check.render import render  # noqa: E402

PODMAN = ["podman", "--runtime", "runc"]  # crun fails on these machines' cgroup layout
# podman's default rlimits (above this machine's hard limits) need CAP_SYS_RESOURCE, which root lacks
# here: the container gets this process's own open-file limit and a process limit below the host's.
_, NOFILE = resource.getrlimit(resource.RLIMIT_NOFILE)
ULIMITS = [f"--ulimit=nofile={NOFILE}:{NOFILE}", "--ulimit=nproc=4096:4096"]
PORT_FLAGS = ("--grpc-port", "--grpc-health-port", "--metrics-port")
LLAMACPP_CONFIG = (ROOT / "config" / "llamacpp.yaml").read_text()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, ready, timeout=60):
    deadline = time.monotonic() + timeout
    while not ready():
        expect(time.monotonic() < deadline, f"{what}: not within {timeout} s")
        time.sleep(0.1)


def http(url, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None, ""


def podman(*args, check=True):
    result = subprocess.run([*PODMAN, *args], capture_output=True, text=True)
    expect(not check or result.returncode == 0, f"podman {' '.join(args)}: {result.stderr.strip()}")
    return result


def check_image(image):
    info = json.loads(podman("image", "inspect", image).stdout)[0]
    config = info["Config"]
    expect(config.get("Entrypoint") == ["/epp"], f"entrypoint {config.get('Entrypoint')}")
    expect(config.get("User") == "65532:65532", f"user {config.get('User')}")
    exposed = set(config.get("ExposedPorts") or {})
    expect({"9002/tcp", "9003/tcp", "9090/tcp"} <= exposed, f"exposed ports {exposed}")
    version = podman("run", "--rm", "--network", "none", *ULIMITS, image, "--version").stdout.strip()
    expect(version.startswith("epp "), f"--version printed {version!r}")
    print(f"  ok    image {image}: {info['Size'] // 1_000_000} MB, entrypoint /epp, user 65532:65532, {version}")
    sidecar = podman("run", "--rm", "--network", "none", *ULIMITS, "--entrypoint", "/epp-pd-sidecar", image,
                     "--version").stdout.strip()
    expect(sidecar.startswith("epp-pd-sidecar "), f"/epp-pd-sidecar --version printed {sidecar!r}")
    print(f"  ok    the P/D sidecar runs in the image: {sidecar}")


def rendered_pod(values):
    with helm.Chart.load(str(CHART)) as chart:
        docs = [d for path, ds in render(chart, values).items() if path != "NOTES" for d in ds]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    config_maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    return deployment["spec"]["template"]["spec"], config_maps


def podman_run_args(pod, config_maps, workdir):
    """The podman options that give the container what the pod spec gives it, and its args with the
    rendered ports moved to free ones ({flag: port})."""
    (container,) = [c for c in pod["containers"] if c["name"] == "epp"]
    expect("command" not in container, "the chart sets a command: the image's entrypoint would be ignored")
    pod_security, security = pod.get("securityContext", {}), container.get("securityContext", {})
    options = ["--user", f"{pod_security['runAsUser']}:{pod_security['runAsGroup']}"]
    if security.get("readOnlyRootFilesystem"):
        options.append("--read-only")
    if "ALL" in security.get("capabilities", {}).get("drop", []):
        options += ["--cap-drop", "ALL"]
    if security.get("allowPrivilegeEscalation") is False:
        options += ["--security-opt", "no-new-privileges"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            source = Path(workdir) / mount["name"]
            source.mkdir()
            for key, text in config_maps[volume["configMap"]["name"]]["data"].items():
                (source / key).write_text(text)
            options += ["-v", f"{source}:{mount['mountPath']}:ro"]
        elif "emptyDir" in volume:
            options += ["--tmpfs", f"{mount['mountPath']}:uid=65532,gid=65532"]
        else:
            raise CheckFailed(f"volume {mount['name']}: no stand-in for {sorted(volume)}")
    ports, args = {}, []
    for arg in container["args"]:
        flag, _, value = arg.partition("=")
        if flag in PORT_FLAGS:
            ports[flag] = free_port()
            value = str(ports[flag])
        args.append(f"{flag}={value}")
    health_probe_port = container["readinessProbe"]["grpc"]["port"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    expect(named.get(health_probe_port, health_probe_port) == int(
        next(a for a in container["args"] if a.startswith("--grpc-health-port=")).split("=")[1]),
        "the readiness probe does not ask epp's --grpc-health-port")
    return options, args, ports


def start(name, argv, workdir):
    log = open(Path(workdir) / f"{name}.log", "w")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def serve_through_envoy(image, workdir, processes):
    venv_python = str(ROOT / ".venv" / "bin" / "python")
    llama_port = free_port()
    processes.append(start("llamacpp", [venv_python, "scripts/llamacpp-server.py", "--port", str(llama_port)],
                           workdir))
    wait_for("llama.cpp /health", lambda: http(f"http://127.0.0.1:{llama_port}/health")[0] == 200)
    pod, config_maps = rendered_pod({"endpoints": [f"127.0.0.1:{llama_port}"],
                                     "config": {"text": LLAMACPP_CONFIG}})
    options, args, ports = podman_run_args(pod, config_maps, workdir)
    name = f"epp-image-check-{os.getpid()}"
    podman("run", "-d", "--name", name, "--network", "host", *ULIMITS, *options, image, *args)
    try:
        wait_for("epp serving", lambda: "epp serving" in podman("logs", name, check=False).stderr
                 + podman("logs", name, check=False).stdout)
        envoy_yaml = Path(workdir) / "envoy.yaml"
        listen, admin = free_port(), free_port()
        env = dict(os.environ, LISTEN_PORT=str(listen), ADMIN_PORT=str(admin),
                   EXTPROC_PORT=str(ports["--grpc-port"]), HEALTH_PORT=str(ports["--grpc-health-port"]))
        envoy_yaml.write_text(subprocess.run(["scripts/render-envoy-config.sh", "deploy/envoy/envoy-full-duplex.yaml"],
                                             cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout)
        envoy = os.environ.get("ENVOY_BIN") or str(ROOT / ".venv" / "bin" / "envoy")
        processes.append(start("envoy", [envoy, "-c", str(envoy_yaml), "-l", "warning",
                                         "--base-id", str(os.getpid() % 60000 + 1)], workdir))
        wait_for("Envoy health-checks epp's health port", lambda: "health_flags::healthy" in
                 http(f"http://127.0.0.1:{admin}/clusters")[1])
        body = {"model": "smollm2", "prompt": "Hello", "max_tokens": 4, "temperature": 0}
        status, text = http(f"http://127.0.0.1:{listen}/v1/completions", body)
        expect(status == 200 and '"choices"' in text, f"through Envoy and the container: {status} {text}")
        metrics = http(f"http://127.0.0.1:{ports['--metrics-port']}/metrics")[1]
        expect('inference_objective_request_total{model_name="smollm2"' in metrics,
               "epp's /metrics does not count the request")
        print("  ok    the chart's pod as a container (rendered args, ConfigMap, read-only root, user 65532, "
              "no capabilities): a completion through Envoy (TLS) to llama.cpp, counted")
        podman("stop", "-t", "30", name)
        code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        expect(code == "0", f"epp exited {code} on SIGTERM:\n{podman('logs', name, check=False).stderr[-2000:]}")
        print("  ok    podman stop: epp drains and exits 0")
    except CheckFailed:
        logs = podman("logs", name, check=False)
        print(f"----- epp container log -----\n{(logs.stdout + logs.stderr)[-3000:]}", file=sys.stderr)
        raise
    finally:
        podman("rm", "-f", name, check=False)


def main():
    version = next(line.split('"')[1] for line in (ROOT / "Cargo.toml").read_text().splitlines()
                   if line.startswith("version = "))
    image = os.environ.get("EPP_IMAGE") or f"localhost/epp:{version}"
    processes = []
    with tempfile.TemporaryDirectory(prefix="image-check-") as workdir:
        try:
            check_image(image)
            serve_through_envoy(image, workdir, processes)
        except CheckFailed as e:
            print(f"image-check: FAILED: {e}")
            for log in sorted(Path(workdir).glob("*.log")):
                print(f"----- {log.name} -----\n{log.read_text()[-2000:]}", file=sys.stderr)
            return 1
        finally:
            for process in processes:
                process.kill()
                process.wait()
    print("image-check: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

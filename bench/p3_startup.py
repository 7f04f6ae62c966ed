"""P3: process start to exit for `spearpy run` of the hello sample, cold
(empty compile cache) and warm (cache populated), and for `spearpy --help`
and `spearpy --version`, vs `python -c "import wasmtime"`; and compiling a
large module vs loading it from the disk cache."""

from __future__ import annotations

import compileall
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.guests import large_module
from bench.s_serve import CHAT, ServeProcess
from bench.s_serve import SCRIPT as CHAT_SCRIPT
from bench.stats import Row, Series, Target
from spearpy.host import Host

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "wasm-samples" / "c_hello.wasm"


def _timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr[-400:]!r}")
    return elapsed


def import_profile(env: dict[str, str], top: int = 10) -> list[dict[str, object]]:
    """Where `spearpy run` spends its start-up: the heaviest imports (cumulative
    microseconds, as `python -X importtime` reports them)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "spearpy", "run",
                           str(HELLO), "hi"], env=env, capture_output=True, text=True,
                          check=False)
    rows = []
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if match:
            depth = len(match.group(3)) // 2
            rows.append({"module": match.group(4), "cumulative_us": int(match.group(2)),
                         "depth": depth})
    top_level = [r for r in rows if r["depth"] <= 1]
    top_level.sort(key=lambda r: -int(str(r["cumulative_us"])))
    return top_level[:top]


def run(quick: bool) -> list[Row]:
    repeats = 3 if quick else 10
    if not HELLO.is_file():
        return [Row("P3.run.warm_vs_import", "P3", "spearpy run c_hello (warm cache)",
                    "python -c 'import wasmtime'", "ms",
                    note=f"{HELLO} is missing (tools/build_wasm.sh builds it)")]
    # Measure spearpy as installed, with its bytecode compiled (pip does that
    # for a regular install; an editable one under PYTHONDONTWRITEBYTECODE
    # would compile every module in every timed process).
    compileall.compile_dir(ROOT / "spearpy", quiet=1)
    series = {name: Series() for name in ("import", "warm", "cold", "help", "version")}
    with tempfile.TemporaryDirectory(prefix="spearpy-bench-") as tmp:
        env = dict(os.environ, SPEARPY_CACHE_DIR=str(Path(tmp) / "warm"))
        env.pop("OPENAI_BASE_URL", None)
        spear = [sys.executable, "-m", "spearpy", "run", str(HELLO), "hi"]
        baseline = [sys.executable, "-c", "import wasmtime"]
        help_argv = [sys.executable, "-m", "spearpy", "--help"]
        version_argv = [sys.executable, "-m", "spearpy", "--version"]
        _timed(spear, env)  # populates the warm cache
        _timed(baseline, env)
        for i in range(repeats):
            series["import"].add(_timed(baseline, env))
            series["warm"].add(_timed(spear, env))
            series["help"].add(_timed(help_argv, env))
            series["version"].add(_timed(version_argv, env))
            cold_env = dict(env, SPEARPY_CACHE_DIR=str(Path(tmp) / f"cold{i}"))
            series["cold"].add(_timed(spear, cold_env))
        profile = import_profile(env)
    rows = [
        Row("P3.run.warm_vs_import", "P3", "spearpy run c_hello (warm compile cache)",
            "python -c 'import wasmtime'", "ms", series["warm"], series["import"],
            Target("<=", 2.0, "<= 2"), extra={"import_profile": profile},
            note="whole processes, start to exit"),
        Row("P3.help.vs_import", "P3", "spearpy --help", "python -c 'import wasmtime'", "ms",
            series["help"], series["import"], Target("<=", 1.3, "<= 1.3")),
        Row("P3.version.vs_import", "P3", "spearpy --version", "python -c 'import wasmtime'",
            "ms", series["version"], series["import"], Target("<=", 1.3, "<= 1.3")),
        Row("P3.run.cold_vs_import", "P3", "spearpy run c_hello (empty compile cache)",
            "python -c 'import wasmtime'", "ms", series["cold"], series["import"],
            note="information"),
    ]
    rows.append(_served_row(repeats, series["import"]))
    rows.append(_compile_row(quick))
    return rows


def _served_row(repeats: int, import_series: Series) -> Row:
    """The warm path for many short runs: the same run through a `spearpy
    serve` already running (its own process, default executor), from a fresh
    `curl` process each time, start to exit, the run's record (stdout
    included) in the answer."""
    subject = "run of c_hello through a warm spearpy serve (a fresh curl, POST wait=true)"
    baseline = "python -c 'import wasmtime'"
    curl = shutil.which("curl")
    if curl is None:
        return Row("P3.run.served_vs_import", "P3", subject, baseline, "ms",
                   note="curl is not installed")
    series = Series()
    with tempfile.TemporaryDirectory(prefix="spearpy-bench-") as tmp_name:
        tmp = Path(tmp_name)
        modules = tmp / "modules"
        modules.mkdir()
        shutil.copy(HELLO, modules / "c_hello.wasm")
        shutil.copy(CHAT, modules / "c_chat.wasm")
        with ServeProcess(modules, tmp / "state", CHAT_SCRIPT) as url:
            argv = [curl, "-sf", "-H", "content-type: application/json", "-d",
                    json.dumps({"module": "c_hello", "args": ["hi"], "wait": True}),
                    f"{url}/v1/runs"]
            first = subprocess.run(argv, capture_output=True, check=True)  # compiles it
            record = json.loads(first.stdout)
            if record.get("exit_code") != 0 or "hi" not in record.get("stdout", ""):
                raise RuntimeError(f"the served run did not print hi: {record}")
            for _ in range(repeats):
                series.add(_timed(argv, dict(os.environ)))
    return Row("P3.run.served_vs_import", "P3", subject, baseline, "ms", series,
               import_series, note="information: the warm path, beside spearpy run's own")


def _compile_row(quick: bool) -> Row:
    wasm = large_module(1000 if quick else 2000)
    repeats = 3 if quick else 7
    compile_s, hit_s = Series(), Series()
    with tempfile.TemporaryDirectory(prefix="spearpy-bench-") as cache:
        with Host(cache_dir=Path(cache), base_url="http://127.0.0.1:9/v1") as first:
            first.load(wasm)  # writes the cache entry
        for _ in range(repeats):
            with Host(cache_dir=None, base_url="http://127.0.0.1:9/v1") as cold:
                start = time.perf_counter()
                cold.load(wasm)
                compile_s.add(time.perf_counter() - start)
            with Host(cache_dir=Path(cache), base_url="http://127.0.0.1:9/v1") as warm:
                start = time.perf_counter()
                loaded = warm.load(wasm)
                hit_s.add(time.perf_counter() - start)
                assert loaded.from_disk_cache
    return Row("P3.compile.cache_hit_vs_compile", "P3",
               f"Host.load from the disk cache ({len(wasm) // 1024} KiB module)",
               "Host.load compiling it", "ms", hit_s, compile_s,
               Target("<=", 0.05, "<= 0.05 (>= 20x faster)"))

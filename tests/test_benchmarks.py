"""Every script in benchmarks/ runs to its end with its smallest arguments on the tiny BERT (the packaged MiniLM
where a script has no backbone option), so that none rots unnoticed; the numbers are not checked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
TINY = "{tiny}"  # the tiny BERT's directory, filled in per test
DATA = "{data}"  # the shared data directory

# script: (arguments, text its output must hold, marks)
SMOKE: dict[str, tuple[list[str], str, list]] = {
    "cli_startup.py": (["--repeats", "1"], "infoprompt --help", []),
    "theory_newton.py": (["--n", "2000", "--d", "5", "--repeats", "1"], "sketch", []),
    "onnx_speed.py": (["--backbone", TINY, "--n", "8", "--repeats", "1", "--batch-size", "4", "--max-length", "32",
                       "--data-dir", "no-such-dir"], "onnxruntime", []),
    "speed.py": (["--backbone", TINY, "--task", "sst2", "--data-dir", DATA, "--methods", "linear-probe", "warp",
                  "--shots", "8", "--steps", "1", "--warmup", "0", "--infer", "8", "--infer-repeats", "1",
                  "--max-length", "32", "--setfit-steps", "1"], "warp", []),
    "tiny_adapters.py": (["--backbone", TINY, "--task", "sst2", "--data-dir", DATA, "--methods", "linear-probe",
                          "--shots", "8", "--steps", "1", "--infer", "8", "--run-epochs", "1", "--max-length", "32",
                          "--threads", "1"], "linear-probe", []),
    "design_check.py": (["--task", "sst2", "--backbone", TINY, "--shots", "8", "--seeds", "11", "--score-rows", "8",
                         "--data-dir", DATA, "--variant", 'p=linear-probe:{"classifier": {"max_length": 32}}'], "p", []),
    "pair_reading_check.py": (["--task", "mrpc", "--backbone", TINY, "--shots", "8", "--seeds", "11", "--score-rows", "8",
                               "--epochs", "1", "--max-length", "32", "--data-dir", DATA, "--variants", "probe-joined", "probe-pair",
                               "probe-pair-balanced", "lora-pair-supcon"], "lora-pair-supcon", []),
    "default_scaling.py": (["--backbone", TINY, "--data-dir", DATA, "--per-class", "2", "3", "--shots", "8",
                            "--max-length", "32"], "SetFit body steps", []),
    "top_lora_packing.py": (["--backbone", TINY, "--data-dir", DATA, "--tasks", "sst2:8", "semeval-types:1",
                             "--rounds", "1", "--max-length", "32"], "packed 128", []),
    "input_memory.py": (["--sizes-mb", "1"], "1", [pytest.mark.slow]),
    "device_check.py": (["--settings", "cpu:fp32", "--methods", "linear-probe", "--backbone", TINY, "--shots", "8",
                         "--epochs", "1", "--max-length", "32", "--data-dir", DATA], "linear-probe", []),
    "serve_bench.py": (["--adapter", str(ROOT / "tests" / "fixtures" / "adapters" / "top-lora"), "--data-dir", DATA,
                        "--counts", "2", "--modes", "shared", "per-adapter", "--traffic", "different", "fan-out",
                        "--requests", "4", "--rounds", "1", "--concurrency", "2", "--threads", "1",
                        "--allow-backbone-dir", "tiny-bert", "--lora-json", "serve-lora.json"], "per-adapter", []),
    "predict_memory.py": (["--rows", "200", "--long-line-mb", "0"], "200", [pytest.mark.slow]),
    "threads.py": (["--quick", "--backbone", TINY, "--max-length", "32", "--scenarios", "alone", "--variants", "one",
                    "--data-dir", DATA], "alone", [pytest.mark.slow]),
    "ddp_check.py": (["--methods", "linear-probe", "--backbone", TINY, "--shots", "8", "--epochs", "1",
                      "--max-length", "32", "--data-dir", DATA, "--processes", "2", "--timeout", "300"],
                     "linear-probe", [pytest.mark.slow]),
    "ray_sweep.py": (["--tasks", "sst2", "--methods", "linear-probe", "--seeds", "1", "--shots", "8",
                      "--backbone", TINY, "--data-dir", DATA, "--configurations", "local-1,ray-1"], "ray",
                     [pytest.mark.slow]),
    # no backbone option: the packaged MiniLM
    "step_time.py": (["--data-dir", DATA, "--steps", "4"], "warp", [pytest.mark.slow]),
    "full_data_gpu.py": (["--allow-cpu", "--budget", "1", "--tasks", "rte", "--methods", "linear-probe", "--seeds", "1",
                          "--data-dir", DATA, "--results", "results", "--quiet"], "full_data_gpu", [pytest.mark.slow]),
}


# A budget spent before the grid is done is full_data_gpu's exit status 3 ("run the same command again").
EXIT_STATUS = {"full_data_gpu.py": 3}


def test_every_benchmark_script_has_a_smoke_run():
    assert sorted(SMOKE) == sorted(path.name for path in BENCHMARKS.glob("*.py"))


@pytest.fixture
def smoke_dir(tiny_model_dirs, data_dir, tmp_path) -> Path:
    """A working directory with the tiny BERT as ``tiny-bert`` (the committed adapters name it so)."""
    import shutil

    shutil.copytree(tiny_model_dirs["bert"], tmp_path / "tiny-bert")
    return tmp_path


@pytest.mark.parametrize("script", [pytest.param(name, marks=marks) for name, (_, _, marks) in SMOKE.items()])
def test_the_benchmark_runs_to_its_end(script, smoke_dir, data_dir):
    arguments, expected, _ = SMOKE[script]
    filled = [arg.replace(TINY, str(smoke_dir / "tiny-bert")).replace(DATA, str(data_dir)) for arg in arguments]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), *filled], cwd=smoke_dir, env=env,
                          capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_STATUS.get(script, 0), output[-3000:]
    assert expected in output, output[-3000:]

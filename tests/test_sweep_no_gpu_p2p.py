"""A real sweep learns from the engine's startup log that its GPUs lack peer-to-peer access
(vLLM: "Custom allreduce is disabled because your platform lacks GPU P2P capability"): the
study is stored with gpu_p2p = false and the rest is predicted with all-reduces through host
memory. The server is knee's simulated one, a real process, which logs vLLM's line where vLLM
would (no GPU here can refuse P2P)."""

from core.serve.startup_log import lacks_gpu_p2p, log_lacks_gpu_p2p
from support.sim_sweep import shown, sweep_simulated_server

VLLM_LINE = (
    "WARNING 08-25 02:13:44 [custom_all_reduce.py:137] Custom allreduce is disabled because your platform lacks GPU P2P "
    "capability or P2P test failed. To silence this warning, specify disable_custom_all_reduce=True explicitly."
)
PCIE_LINE = (
    "WARNING 08-25 02:13:44 [custom_all_reduce.py:124] Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs."
)


def test_the_startup_line_is_recognised_and_nothing_else(tmp_path):
    assert lacks_gpu_p2p("INFO starting\n" + VLLM_LINE + "\nINFO ready")
    assert not lacks_gpu_p2p("INFO starting\n" + PCIE_LINE + "\nINFO ready")  # says nothing about P2P
    log = tmp_path / "server.log"
    log.write_text("knee: launching: vllm serve m\n" + VLLM_LINE + "\n")
    assert log_lacks_gpu_p2p(log)
    assert not log_lacks_gpu_p2p(tmp_path / "missing.log") and not log_lacks_gpu_p2p(None)


def _sweep(tmp_path, server_flags: str):
    return sweep_simulated_server(tmp_path, "p2p", "custom", server_flags, "A100-80GB", 2, "tensor_parallel_size=[2]")


def test_a_sweep_whose_engine_lacks_gpu_p2p_predicts_the_rest_through_host_memory(tmp_path):
    store, runner, ready = _sweep(tmp_path, "--no-gpu-p2p")
    assert ready and ready[0]["gpu_p2p"] is False
    assert store.spec("p2p").gpu_p2p is False  # stored: the Pareto view and a resume see it
    cal = runner.learner.calibration
    assert cal.hardware.gpu.interconnect == "pcie-host"
    assert cal.base.__self__.hardware.gpu.interconnect == "pcie-host"  # the learner's reference

    # Said where the user watches: the text output and the TUI's log of the trial.
    printed, trial_log = shown(store, "p2p", ready[0])
    assert "no GPU peer-to-peer" in printed
    assert any("server ready: no GPU peer-to-peer" in line for line in trial_log)


def test_a_sweep_whose_engine_has_gpu_p2p_keeps_nvlink(tmp_path):
    store, runner, ready = _sweep(tmp_path, "")
    assert ready and "gpu_p2p" not in ready[0]
    assert store.spec("p2p").gpu_p2p is True
    assert runner.learner.calibration.hardware.gpu.interconnect == "nvlink"

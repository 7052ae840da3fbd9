"""`dit-ar doctor` without NVML: its "gpu exclusivity" row names why, through the console script
(the lane's decision without NVML: tests/unit/hardware/test_nvml_unavailable.py)."""
import re


def test_doctor_reports_nvml_it_cannot_import(project, monkeypatch, tmp_path):
    fake = tmp_path / "fake-site"
    fake.mkdir()
    (fake / "pynvml.py").write_text("raise ImportError('no NVML in this image')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake))
    res = project.ditar("doctor")
    row = re.search(r"^gpu exclusivity +(\S+) +(.*)$", res.stdout, flags=re.M)
    assert row, res.stdout + res.stderr
    why = "NVML unavailable (pynvml not importable: no NVML in this image; pip install nvidia-ml-py)"
    assert row.groups() == ("warn", f"{why}; no CUDA device here, so CPU lanes are not affected")

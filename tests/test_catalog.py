import pytest

from core.catalog import get_gpu, get_instance, gpus, instances, resolve_hardware
from core.catalog import hardware as hw_mod
from core.errors import BadInput

REQUIRED_GPUS = ["A10G", "L4", "L40S", "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIE", "H200", "B200"]
REQUIRED_FAMILIES = ["ml.g5.", "ml.g6.", "ml.g6e.", "ml.p4d.", "ml.p4de.", "ml.p5.", "ml.p5e.", "ml.p5en.", "ml.p6-b200."]


def test_required_gpus_have_the_datasheet_fields():
    table = gpus()
    for name in REQUIRED_GPUS:
        g = table[name]
        assert g.memory_gb > 0 and g.bandwidth_gbps > 0 and g.link_bandwidth_gbps > 0
        assert g.tflops["bf16"] > 0 and g.tflops["fp16"] > 0
        assert g.link
    assert table["H100-SXM"].tflops["fp8"] == 1979
    assert "fp8" not in table["A100-80GB"].tflops  # Ampere has no FP8 tensor cores
    assert table["L4"].nvlink is False and table["H100-SXM"].nvlink is True
    assert "bandwidth_gbps" in table["A10G"].uncertain


SELF_HOSTED_GPUS = [
    "H100-NVL",
    "H20",
    "GH200",
    "GH200-144GB",
    "L40",
    "A10",
    "A40",
    "RTX-A6000",
    "RTX-6000-Ada",
    "RTX-4090",
    "A100-80GB-PCIE",
    "A100-40GB-PCIE",
]


@pytest.mark.parametrize("name", SELF_HOSTED_GPUS)
def test_self_hosted_gpus_say_where_their_figures_come_from_and_predict(name):
    """The GPUs of self-hosted boxes beyond SageMaker's: each entry cites what was read (an
    unconfirmed figure is listed as uncertain), its architecture has efficiencies, its aliases
    resolve, and the estimator predicts a model on two of them."""
    from core.estimate import estimate
    from core.estimate.params import calibration

    g = gpus()[name]
    assert "http" in g.source and g.architecture in calibration()["architecture"]
    # A datasheet's "GB" of GPU memory is about what the driver reports in GiB (H100 SXM: 80 and 79.6).
    assert g.tflops["bf16"] > 0 and g.bandwidth_gbps > 0 and 0.9 * g.memory_gb < g.visible_memory_gib <= g.memory_gb
    assert all(get_gpu(a).name == name for a in g.aliases)
    rep = estimate(model="Qwen/Qwen3-8B", gpu=name, num_gpus=2, concurrency=[8])
    assert rep.best is not None and rep.best.at_knee.output_tok_per_s > 0


def test_cards_without_peer_to_peer_all_reduce_through_the_host():
    # GeForce drivers leave PCIe peer-to-peer off; the NVLink-bridged pairs of H100 NVL keep it.
    assert gpus()["RTX-4090"].p2p is False and "p2p" in gpus()["RTX-4090"].uncertain
    assert gpus()["H100-NVL"].p2p is True and gpus()["H100-NVL"].nvlink is True
    assert "tflops" in gpus()["L40"].uncertain  # the datasheet's 181 dense against a clock-based 362


def test_required_instance_families_priced_and_dated():
    table = instances()
    for fam in REQUIRED_FAMILIES:
        assert any(n.startswith(fam) for n in table), fam
    g6 = table["ml.g6.12xlarge"]
    assert (g6.gpu, g6.num_gpus, g6.vcpus, g6.host_memory_gib) == ("L4", 4, 48, 192)
    assert g6.price_per_hour == pytest.approx(5.752) and g6.price_date
    for inst in table.values():
        assert inst.gpu in gpus()


def test_lookup_by_alias_and_errors():
    assert get_gpu("h100").name == "H100-SXM"
    assert get_instance("g6.12xlarge").name == "ml.g6.12xlarge"
    with pytest.raises(BadInput, match="unknown GPU 'H1000'.*did you mean"):
        get_gpu("H1000")
    # The device names NVML and nvidia-smi report (what a sweep's store records).
    assert get_gpu("NVIDIA H100 80GB HBM3").name == "H100-SXM"
    # ... and as benchmark write-ups copy them, without the vendor.
    assert get_gpu("H100 80GB HBM3").name == "H100-SXM" and get_gpu("H200 141GB HBM3e").name == "H200"
    assert get_gpu("A100 80GB PCIe").name == "A100-80GB-PCIE" and get_gpu("A100-SXM4-40GB").name == "A100-40GB"
    assert get_gpu("NVIDIA A100-SXM4-80GB").name == "A100-80GB"
    assert get_gpu("NVIDIA H100 PCIe").name == "H100-PCIE"
    # The PCIe A100s are not the SXM parts: less bandwidth, no NVLink between them.
    pcie80, pcie40 = get_gpu("NVIDIA A100 80GB PCIe"), get_gpu("NVIDIA A100-PCIE-40GB")
    assert (pcie80.name, pcie40.name) == ("A100-80GB-PCIE", "A100-40GB-PCIE")
    assert pcie80.interconnect == pcie40.interconnect == "pcie" and pcie80.bandwidth_gbps < get_gpu("A100-80GB").bandwidth_gbps
    assert get_gpu("NVIDIA GeForce RTX 4090").name == "RTX-4090"
    assert get_gpu("NVIDIA RTX 6000 Ada Generation").name == "RTX-6000-Ada"
    with pytest.raises(BadInput, match="unknown GPU 'Tesla T4'"):
        get_gpu("Tesla T4")
    with pytest.raises(BadInput, match="unknown GPU 'H100 turbo'"):  # no first-word guess for a user's typo
        get_gpu("H100 turbo")
    with pytest.raises(BadInput, match="unknown SageMaker instance"):
        get_instance("ml.g9.huge")


def test_resolve_hardware():
    hw = resolve_hardware(instance="ml.g6.12xlarge")
    assert hw.gpu.name == "L4" and hw.num_gpus == 4 and hw.instance.price_per_hour
    assert resolve_hardware(gpu="H100", num_gpus=2).num_gpus == 2
    with pytest.raises(BadInput):
        resolve_hardware()
    with pytest.raises(BadInput):
        resolve_hardware(instance="ml.g6.12xlarge", num_gpus=8)


def test_user_override_replaces_and_adds(tmp_path, monkeypatch):
    override = tmp_path / "catalog.toml"
    override.write_text(
        '[instances."ml.g6.12xlarge"]\nprice_per_hour = 4.5\nprice_date = "2026-11-01"\n\n'
        "[gpus.MI300X]\nmemory_gb = 192\nbandwidth_gbps = 5300\ntflops = { bf16 = 1307, fp16 = 1307 }\n"
        'link = "infinityfabric"\nlink_bandwidth_gbps = 896\narchitecture = "cdna3"\n'
    )
    monkeypatch.setenv("KNEE_CATALOG", str(override))
    hw_mod._load.cache_clear()
    inst = get_instance("ml.g6.12xlarge")
    assert inst.price_per_hour == 4.5 and inst.price_source == "user override"
    assert "price_per_hour" not in inst.uncertain
    assert get_gpu("MI300X").memory_gb == 192


def test_broken_override_is_bad_input(tmp_path, monkeypatch):
    bad = tmp_path / "catalog.toml"
    bad.write_text("[gpus.X\n")
    monkeypatch.setenv("KNEE_CATALOG", str(bad))
    hw_mod._load.cache_clear()
    with pytest.raises(BadInput, match="not valid TOML"):
        gpus()


def test_bundled_prices_cover_every_g_size_and_say_where_they_come_from():
    """Issue 13: every g5/g6/g6e size is priced, dated and sourced; the P types with no found
    hosting price stay unpriced rather than guessed."""
    table = instances()
    for inst in table.values():
        if inst.name.startswith(("ml.g5.", "ml.g6.", "ml.g6e.")):
            assert inst.price_per_hour and inst.price_date, inst.name
    assert table["ml.g6e.8xlarge"].price_per_hour == pytest.approx(5.6607)
    assert "63289214416" in table["ml.g6e.8xlarge"].price_source
    assert table["ml.p5e.48xlarge"].price_per_hour is None


def test_every_bundled_price_is_dated_uncertain_and_every_p_price_names_its_source(monkeypatch):
    """Issue 13: a bundled price is read from somewhere, never guessed. In every region each one
    carries its date and stays marked uncertain, and each P-type price names where it was read
    (the g5/g6/g6e us-east-1 ones share the file header's source). No P type has a us-west-2
    price: none was found, so it is excluded there rather than given another region's."""
    monkeypatch.delenv("KNEE_CATALOG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent")
    hw_mod._load.cache_clear()
    priced = [(r, i) for r in hw_mod.regions() for i in hw_mod.instances_in(r).values() if i.price_per_hour is not None]
    assert len(priced) >= 40
    for region, inst in priced:
        assert inst.price_date and "price_per_hour" in inst.uncertain, (region, inst.name)
        if inst.name.startswith("ml.p"):
            assert inst.price_source != "bundled default", (region, inst.name)
    west = hw_mod.instances_in("us-west-2")
    assert all(i.price_per_hour is None for n, i in west.items() if n.startswith("ml.p"))
    # p4d and p5.48xlarge: the fmbench copy of the pre-2025 list price, not a guess.
    for name, price in (("ml.p4d.24xlarge", 37.688), ("ml.p5.48xlarge", 113.068)):
        assert instances()[name].price_per_hour == pytest.approx(price) and "fmbench" in instances()[name].price_source


def test_second_region_prices_only_what_it_has(monkeypatch):
    monkeypatch.delenv("KNEE_CATALOG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent")
    hw_mod._load.cache_clear()
    assert hw_mod.instances_in(None) == instances()
    west = hw_mod.instances_in("us-west-2")
    g = west["ml.g6e.12xlarge"]
    assert g.price_per_hour == pytest.approx(13.1158) and g.price_region == "us-west-2"
    assert "BatchTransform" in g.price_source and "price_per_hour" in g.uncertain
    assert g.num_gpus == 4 and g.notes == "PCIe, no NVLink"  # only the price fields change
    # No us-west-2 price for P5: unpriced, never the us-east-1 one.
    assert west["ml.p5.48xlarge"].price_per_hour is None
    assert west["ml.p5.48xlarge"].price_source == "no us-west-2 price in the catalog"
    assert sum(1 for i in west.values() if i.price_per_hour) == 22
    assert hw_mod.instances_in("us-east-2")["ml.p5en.48xlarge"].price_per_hour == pytest.approx(72.795)
    assert hw_mod.regions()[0] == "us-east-1" and "us-west-2" in hw_mod.regions()


def test_user_region_prices_add_to_the_bundled_ones(tmp_path, monkeypatch):
    override = tmp_path / "catalog.toml"
    override.write_text(
        '[instances."ml.g6e.12xlarge".regions.eu-west-1]\nprice_per_hour = 14.5\nprice_date = "2026-11-20"\nprice_source = "my AWS bill"\n'
    )
    monkeypatch.setenv("KNEE_CATALOG", str(override))
    hw_mod._load.cache_clear()
    assert hw_mod.instances_in("eu-west-1")["ml.g6e.12xlarge"].price_per_hour == 14.5
    assert hw_mod.instances_in("us-west-2")["ml.g6e.12xlarge"].price_per_hour == pytest.approx(13.1158)
    assert get_instance("ml.g6e.12xlarge").price_per_hour == pytest.approx(13.12)


def test_region_table_with_a_non_price_field_is_bad_input(tmp_path, monkeypatch):
    bad = tmp_path / "catalog.toml"
    bad.write_text('[instances."ml.g6e.12xlarge".regions.eu-west-1]\nnum_gpus = 2\n')
    monkeypatch.setenv("KNEE_CATALOG", str(bad))
    hw_mod._load.cache_clear()
    with pytest.raises(BadInput, match="regions.eu-west-1 may hold only"):
        instances()


def test_user_region_price_is_labelled_and_checked(tmp_path, monkeypatch):
    override = tmp_path / "catalog.toml"
    override.write_text('[instances."ml.g6.12xlarge".regions.eu-west-1]\nprice_per_hour = 6.1\n')
    monkeypatch.setenv("KNEE_CATALOG", str(override))
    hw_mod._load.cache_clear()
    assert hw_mod.instances_in("eu-west-1")["ml.g6.12xlarge"].price_source == "user override"
    override.write_text('[instances."ml.g6.12xlarge".regions.eu-west-1]\nprice_per_hour = "cheap"\n')
    hw_mod._load.cache_clear()
    with pytest.raises(BadInput, match=r"ml.g6.12xlarge.regions.eu-west-1.price_per_hour"):
        hw_mod.instances_in("eu-west-1")

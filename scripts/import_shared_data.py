"""Regenerate catalogs/models.csv and catalogs/prices/*.csv from the sourced facts in
../shared/data.

Run once when ../shared/data changes: `python -m scripts.import_shared_data`. Source and as_of
columns are kept verbatim. Layout columns the CSV leaves implicit (family, biases, head_dim) come
from the models' config.json conventions, stated in the `layout_note` column.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"

FAMILY = {"SmolLM": "llama", "Llama": "llama", "Phi": "phi", "Gemma": "gemma", "Yi": "yi",
          "Qwen2.5": "qwen2", "Mistral": "mistral"}
HEAD_DIM = {"Gemma-2B": 256}
# Small shapes for CPU tests and benchmarks; not real models.
SMALL = [
    ("tiny-llama", "llama", 64, 2, 4, 2, 176, 512, "false"),
    ("tiny-gqa", "llama", 128, 2, 8, 2, 344, 1024, "true"),
    ("small-llama", "llama", 256, 4, 8, 4, 688, 4096, "false"),
    ("tiny-phi", "phi", 64, 2, 4, 4, 256, 512, "false"),
]
# Provider GPU names -> catalog GPU names.
GPU_ALIASES = {
    "H200-SXM-141GB": "H200-SXM-141GB", "H200-141GB": "H200-SXM-141GB", "H200": "H200-SXM-141GB",
    "A100-PCIe-80GB": "A100-PCIe-80GB", "A100-SXM-80GB": "A100-SXM4-80GB",
    "A100-SXM4-80GB": "A100-SXM4-80GB", "A100-80GB": "A100-SXM4-80GB",
    "H100-SXM-80GB": "H100-SXM5-80GB", "H100-80GB": "H100-SXM5-80GB", "H100": "H100-SXM5-80GB",
    "H100-80GB (HGX H100)": "H100-SXM5-80GB", "H200-141GB (HGX H200)": "H200-SXM-141GB",
    "H100-PCIe-80GB": "H100-PCIe", "B200-180GB": "B200", "B200": "B200", "L40S-48GB": "L40S",
    "RTX-4090-24GB": "RTX-4090", "RTX-4090": "RTX-4090",
}


def family_of(name: str) -> str:
    for prefix, fam in FAMILY.items():
        if name.startswith(prefix):
            return fam
    return "llama"


def write_models() -> None:
    rows = list(csv.DictReader((SHARED / "models.csv").open()))
    out = ROOT / "catalogs" / "models.csv"
    cols = ["name", "family", "hf_id", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
            "max_position_embeddings", "tie_word_embeddings", "activation", "params_b", "source"]
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            r = {k: r[k] for k in r if k in cols} | {
                "name": r["model"],
                "family": family_of(r["model"]),
                "head_dim": HEAD_DIM.get(r["model"], ""),
            }
            w.writerow(r)
        for name, fam, h, n_layers, a, kv, f, v, tie in SMALL:
            w.writerow(
                {
                    "name": name,
                    "family": fam,
                    "hf_id": "",
                    "hidden_size": h,
                    "num_hidden_layers": n_layers,
                    "num_attention_heads": a,
                    "num_key_value_heads": kv,
                    "head_dim": "",
                    "intermediate_size": f,
                    "vocab_size": v,
                    "max_position_embeddings": 2048,
                    "tie_word_embeddings": tie,
                    "activation": "gelu_new" if fam == "phi" else "silu",
                    "params_b": "",
                    "source": "ShardMeter test shape (not a published model)",
                }
            )


# Node facts the datasheet rows leave out: (usable GiB, intra-node link, default inter-node NIC,
# NICs per node, GPUs per node). Usable memory = what the framework can allocate after the CUDA/ROCm
# context and communicator buffers (about 1.5-2 GiB below the device total; assumption, stated).
NODE_FACTS = {
    "A100-SXM4-80GB": (77.5, "nvlink3", "ib-hdr200", 4, 8),
    "A100-PCIe-80GB": (77.5, "pcie4", "ib-hdr200", 4, 8),
    "H100-SXM5-80GB": (77.5, "nvlink4", "ib-ndr400", 8, 8),
    "H100-PCIe": (77.5, "pcie5", "ib-ndr400", 4, 8),
    "H200-SXM-141GB": (138.0, "nvlink4", "ib-ndr400", 8, 8),
    "B200": (176.0, "nvlink5", "ib-ndr400", 8, 8),
    "L40S": (43.5, "pcie4", "eth-100g", 2, 8),
    "RTX-4090": (22.5, "pcie4", "eth-100g", 1, 8),
    "AMD-MI300X": (189.0, "infinity-fabric", "eth-400g", 8, 8),
}


def write_gpus() -> None:
    rows = list(csv.DictReader((SHARED / "gpus.csv").open()))
    out = ROOT / "catalogs" / "gpus.csv"
    extra = ["usable_memory_gib", "intra_node_link", "inter_node_link", "nics_per_node",
             "max_gpus_per_node"]
    with out.open("w", newline="") as fh:
        cols = [c for c in rows[0] if c != "source"] + extra + ["source"]
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            facts = NODE_FACTS[r["gpu_type"]]
            w.writerow(r | dict(zip(extra, facts, strict=True)))


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def write_prices() -> None:
    rows = list(csv.DictReader((SHARED / "prices.csv").open()))
    lists: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        provider = r["provider"].split(" (")[0].strip()
        gpu = GPU_ALIASES.get(r["gpu_type"].strip())
        if gpu is None or "-" in r["on_demand_usd_per_gpu_hour"].strip("-"):
            continue  # unknown GPU in our catalog, or a price range rather than a price
        spot_tier = "community" if provider == "RunPod" else "spot"
        for tier, key in (("on-demand", "on_demand_usd_per_gpu_hour"),
                          (spot_tier, "spot_or_community_usd_per_gpu_hour")):
            price = r[key].strip()
            if not price:
                continue
            name = f"{slug(provider)}-{r['as_of']}"
            lists.setdefault(name, []).append(
                {
                    "provider": provider, "offer": r["provider"], "gpu_type": gpu,
                    "provider_gpu_name": r["gpu_type"], "gpus_per_node": r["gpus_per_node"] or "",
                    "tier": tier, "usd_per_gpu_hour": price, "as_of": r["as_of"],
                    "source": r["source"],
                }
            )
    folder = ROOT / "catalogs" / "prices"
    folder.mkdir(parents=True, exist_ok=True)
    for name, items in lists.items():
        with (folder / f"{name}.csv").open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(items[0]))
            w.writeheader()
            w.writerows(items)


if __name__ == "__main__":
    if not SHARED.is_dir():
        sys.exit(f"{SHARED} not found: run from a checkout with ../shared beside it")
    write_models()
    write_gpus()
    write_prices()

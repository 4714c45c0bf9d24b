"""The inference peak: counted in the run that records the graph, with folded layers added back."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from fixtures.small_models import TextbookMHA
from torch import Tensor, nn

from mhaudit.api import audit
from mhaudit.memory.peak import fake_forward_peak, peak_of
from mhaudit.trace.export import TRACER_ENV
from mhaudit.trace.fold import folded
from mhaudit.trace.recorder import record


class _Keeping(nn.Module):
    """A layer that leaves ``keep`` tensors of its output's size alive in ``cache``."""

    def __init__(self, keep: int) -> None:
        super().__init__()
        self.keep = keep
        self.lin = nn.Linear(8, 8)

    def forward(self, x: Tensor, cache: list[Tensor]) -> Tensor:
        y = self.lin(x)
        cache.extend(y * (i + 2) for i in range(self.keep))  # kept to the end, like K/V
        return torch.relu(y)


class _Stack(nn.Module):
    """Four layers that keep nothing, then four that keep two tensors each: the second
    group's representative is layer 4, the second in the shortened list."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([*(_Keeping(0) for _ in range(4)),
                                     *(_Keeping(2) for _ in range(4))])

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        cache: list[Tensor] = []
        for layer in self.layers:
            x = layer(x, cache)
        return (x, *cache)


class _Chain(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        a = x * 2  # 4·16·4 B = 256 B
        b = a.view(16, 4) * 3  # 256 B, while a is alive: 512 B
        del a
        c = b.t().contiguous()  # 256 B; a is gone: the peak stays 512 B
        return c


class _Counting(TextbookMHA):
    calls = 0

    def forward(self, x: Tensor) -> Tensor:
        type(self).calls += 1
        return super().forward(x)


def test_one_audit_runs_one_forward_where_the_record_answers(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    monkeypatch.delenv(TRACER_ENV, raising=False)
    _Counting.calls = 0
    with torch.device("meta"):
        model = _Counting().eval()
    report = audit(model, (torch.randn(2, 10, 64, device="meta"),))
    assert report.model.trace_method == "dispatch-record"
    assert _Counting.calls == 1  # the graph and the peak come from the same fake forward
    assert report.totals.peak_activation_bytes


def test_export_rung_runs_its_own_fake_forward_for_the_same_peak(
        monkeypatch: pytest.MonkeyPatch) -> None:
    peaks = {}
    for tracer in ("dispatch-record", "torch.export"):
        monkeypatch.setenv(TRACER_ENV, tracer)
        _Counting.calls = 0
        model = _Counting().eval()
        peaks[tracer] = audit(model, (torch.randn(2, 10, 64),)).totals.peak_activation_bytes
        assert _Counting.calls == (1 if tracer == "dispatch-record" else 2)
    assert peaks["dispatch-record"] == peaks["torch.export"]


class _Block(nn.Module):
    """One pre-norm GPT block called as a module, so that a folded list can stand in for
    its copies."""

    def __init__(self, d: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2)
                   for t in self.qkv(self.ln(x)).split(d, dim=2))  # 3 × (b, h, n, d_k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, h, n, d_k)
        return x + self.proj(y.transpose(1, 2).reshape(b, n, d))


class _CalledGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 64)
        self.blocks = nn.ModuleList(_Block() for _ in range(6))
        self.head = nn.Linear(64, 100)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)  # (b, n, d)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_the_records_count_equals_a_forward_of_its_own() -> None:
    torch.manual_seed(0)
    model = _CalledGPT().eval()
    ids = torch.zeros(2, 12, dtype=torch.long)
    with folded(model) as plans:
        assert plans  # six identical blocks: one representative
        recorded = record(model, (ids,), {}, fake=True)
        own = fake_forward_peak(model, (ids,), {}, plans)
    assert recorded.storages is not None
    assert peak_of(recorded.storages, plans) == own


def test_graph_values_keep_no_storage_alive() -> None:
    recorded = record(_Chain(), (torch.randn(4, 16),), {}, fake=True)
    assert recorded.storages is not None
    assert peak_of(recorded.storages).activation_bytes == 512
    assert recorded.storages.retained_bytes == 256  # only c, the output
    values = [n.meta["val"] for n in recorded.graph.nodes if n.op == "call_function"]
    assert all(v.device.type == "meta" for v in values if isinstance(v, torch.Tensor))
    view = next(n for n in recorded.graph.nodes if "view" in str(n.target))
    base = view.args[0].meta["val"]  # a view still shares its base's (stand-in) storage
    assert view.meta["val"].untyped_storage()._cdata == base.untyped_storage()._cdata


def test_folded_leftovers_follow_each_group_representative() -> None:
    """Eight layers, folded to two representatives (layers 0 and 4): layer 4's kept
    tensors are added for its three copies, as if all eight had run."""
    torch.manual_seed(0)
    model = _Stack().eval()
    x = torch.randn(2, 16, 8)
    unfolded = audit(model, (x,), fold=False, dtype="fp32").totals.peak_activation_bytes
    report = audit(model, (x,), dtype="fp32")
    assert report.extras["folded_layers"] == [{"list": "layers", "layers": 8, "traced": 2}]
    assert report.totals.peak_activation_bytes == unfolded
    # 4 layers · 2 kept tensors · 2·16·8·4 B = 8 KiB alive at the end, plus what the last
    # layer holds while it runs
    assert unfolded > 4 * 2 * 2 * 16 * 8 * 4


def test_data_dependent_guesses_leave_no_count() -> None:
    class _Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: Tensor) -> Tensor:
            y = self.lin(x)
            return y * 2 if y.sum().item() > 0 else y

    with torch.device("meta"):
        model = _Branchy()
    recorded = record(model, (torch.randn(2, 4, device="meta"),), {}, fake=True, guess=True)
    assert "read as 0" in recorded.method
    assert recorded.storages is None  # the forward ran a branch the data may not take


def test_a_fast_path_chosen_by_the_records_mode_leaves_no_count() -> None:
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0).eval()
    recorded = record(layer, (torch.randn(2, 6, 32),), {}, fake=True)
    # alone, the layer runs torch's fused fast path; under the record it runs the pieces
    assert recorded.storages is None
    assert fake_forward_peak(layer, (torch.randn(2, 6, 32),), {}).activation_bytes > 0

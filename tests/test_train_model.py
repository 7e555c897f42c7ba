"""The policy: a tiny model and tokenizer built locally, saved and reloaded with or without LoRA, run state."""
import pytest
import torch

from kernelrl.train.checkpoints import RunState, export_merged, last_trainer_checkpoint, load_policy, save_policy
from kernelrl.train.config import LoraSettings
from kernelrl.train.model import ModelError, TinySpec, build_tiny_model, build_tokenizer, load_model

CODE = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
SPEC = TinySpec(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1, vocab_size=512)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer([CODE, "Make this PyTorch program faster."] * 4, vocab_size=512)


@pytest.fixture
def base(tmp_path, tokenizer):
    return save_policy(build_tiny_model(SPEC, tokenizer), tokenizer, tmp_path / "base")


def test_the_tokenizer_round_trips_text_it_was_never_trained_on(tokenizer):
    text = "√ über 数 __global__ void k(float* y) { y[threadIdx.x] = 0.f; }\n\t"
    assert tokenizer.decode(tokenizer(text).input_ids) == text


def test_code_it_was_trained_on_compresses_to_few_tokens(tokenizer):
    assert len(tokenizer(CODE).input_ids) < len(CODE) / 3


def test_the_chat_template_ends_where_the_assistant_starts(tokenizer):
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n") and tokenizer.eos_token == "<|im_end|>"


def test_the_tiny_model_is_sized_to_the_tokenizer_and_generates(tokenizer):
    model = build_tiny_model(SPEC, tokenizer)
    assert model.config.vocab_size == len(tokenizer) and model.config.hidden_size == 32
    ids = tokenizer("import torch", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=5, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] == ids["input_ids"].shape[1] + 5 or out[0, -1] == tokenizer.eos_token_id


def test_the_same_seed_builds_the_same_model(tokenizer):
    a, b = build_tiny_model(SPEC, tokenizer), build_tiny_model(SPEC, tokenizer)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_a_fresh_lora_policy_trains_only_its_adapters(base):
    model, _ = load_policy(base, None, LoraSettings(r=4, alpha=8))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def test_a_saved_lora_adapter_reloads_with_its_trained_weights(base, tmp_path):
    model, tok = load_policy(base, None, LoraSettings(r=4, alpha=8))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.add_(0.5)
    save_policy(model, tok, tmp_path / "adapter")
    again, _ = load_policy(base, tmp_path / "adapter", LoraSettings(r=4, alpha=8))
    saved = dict(model.named_parameters())
    for n, p in again.named_parameters():
        if "lora_B" in n:
            assert torch.equal(p, saved[n]) and p.requires_grad


def test_merging_an_adapter_changes_the_exported_weights(base, tmp_path):
    model, tok = load_policy(base, None, LoraSettings(r=4, alpha=8))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.add_(0.5)
    save_policy(model, tok, tmp_path / "adapter")
    merged = load_model(export_merged(base, tmp_path / "adapter", tmp_path / "final", LoraSettings(r=4, alpha=8)))
    original = load_model(base)
    changed = [n for (n, p), q in zip(merged.named_parameters(), original.parameters()) if not torch.equal(p, q)]
    assert changed and all("proj" in n for n in changed)


def test_full_fine_tuning_trains_every_weight(base):
    model, _ = load_policy(base, None, LoraSettings(enabled=False))
    assert all(p.requires_grad for p in model.parameters())


def test_a_model_path_that_is_not_a_folder_says_how_to_get_one(tmp_path):
    with pytest.raises(ModelError, match="download"):
        load_model(tmp_path / "missing")


def test_run_state_remembers_finished_stages_and_rounds_across_processes(tmp_path):
    state = RunState.load(tmp_path)
    assert not state.done("sft") and state.latest_policy(("sft", "self_training")) is None
    state.mark("sft", tmp_path / "sft")
    state.mark_round(tmp_path / "round-1")
    again = RunState.load(tmp_path)
    assert again.done("sft") and not again.done("self_training") and again.rounds_done == 1
    assert again.latest_policy(("sft", "self_training", "contrastive_rl")) == str(tmp_path / "round-1")


def test_the_newest_trainer_checkpoint_is_found_by_step_number(tmp_path):
    for n in (5, 40, 100):
        (tmp_path / f"checkpoint-{n}").mkdir()
    assert last_trainer_checkpoint(tmp_path) == str(tmp_path / "checkpoint-100")
    assert last_trainer_checkpoint(tmp_path / "none") is None

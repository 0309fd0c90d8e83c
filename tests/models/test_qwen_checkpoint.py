"""Qwen2-Audio and Qwen2.5-Omni targets load prompt and features from their checkpoint files.

Each tiny random checkpoint of `tiny_qwen_dirs` (tests/conftest.py) is saved again as a
release is: weights, config and generation config, tokenizer files, `preprocessor_config.json`
and the processor's chat template. It loads through the public path (`load_target` on the
directory), and its prompt ids and features must equal what transformers' own processor
builds from the same directory (`apply_chat_template`, then `processor(text, audio)`).
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import (
    AutoFeatureExtractor,
    AutoImageProcessor,
    AutoProcessor,
    AutoTokenizer,
    GenerationConfig,
    Qwen2_5OmniProcessor,
    Qwen2AudioProcessor,
    WhisperFeatureExtractor,
)
from transformers.processing_utils import ProcessorMixin

from as2d.engine.decode import decode_target_only
from as2d.models.qwen import ChatAudioTarget
from as2d.models.qwen_checkpoint import device_map, not_greedy
from as2d.models.targets import load_target
from as2d.target import Request

FAMILIES = ("qwen2_audio", "qwen2_5_omni_thinker")
AUDIO = np.random.default_rng(0).standard_normal(16_000 * 3).astype(np.float32) * 0.1  # 3 s
REQUESTS = [
    Request("ask", None, "What is said here? Summarise the recording."),
    Request("transcribe"),
    Request("transcribe", "fr"),
    Request("translate", "de"),
]

# The processor chat templates of the releases: Qwen2-Audio-7B-Instruct's chat_template.json
# (also Qwen2AudioProcessor's default) and Qwen2.5-Omni-7B's.
QWEN2_AUDIO_TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}"
    "{% for content in message['content'] %}{% if 'audio' in content or 'audio_url' in content "
    "or message['type'] == 'audio' or content['type'] == 'audio' %}"
    "{% set audio_count.value = audio_count.value + 1 %}"
    "Audio {{ audio_count.value }}: <|audio_bos|><|AUDIO|><|audio_eos|>\n"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
OMNI_TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}{% set image_count = namespace(value=0) %}"
    "{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}"
    "{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in content "
    "or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_bos|><|IMAGE|><|vision_eos|>{% elif content['type'] == 'audio' or 'audio' in content "
    "or 'audio_url' in content %}{% set audio_count.value = audio_count.value + 1 %}"
    "{% if add_audio_id %}Audio {{ audio_count.value }}: {% endif %}"
    "<|audio_bos|><|AUDIO|><|audio_eos|>{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_bos|><|VIDEO|><|vision_eos|>{% elif 'text' in content %}{{ content['text'] }}"
    "{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# A fine-tune's own template: another default system prompt, no "Audio 1: " label.
TUNED_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou transcribe phone calls.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% for content in message['content'] %}"
    "{% if content['type'] == 'audio' %}<|audio_bos|><|AUDIO|><|audio_eos|>"
    "{% else %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Qwen2_5OmniProcessor reads these tokens as tokenizer attributes (tokenizer_config.json).
OMNI_TOKENS = {
    "image_token": "<|IMAGE|>",
    "audio_token": "<|AUDIO|>",
    "video_token": "<|VIDEO|>",
    "vision_bos_token": "<|vision_bos|>",
    "vision_eos_token": "<|vision_eos|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
}
SAMPLING = {"do_sample": True, "temperature": 0.7, "top_p": 0.5, "repetition_penalty": 1.1}


def save_as_released(
    source: Path, out: Path, template: str | None = None, generation: dict[str, Any] | None = None
) -> Path:
    """Copies a tiny checkpoint and adds the processor files a release has.

    Qwen2-Audio: a 30 s Whisper `preprocessor_config.json` and the legacy `chat_template.json`;
    Qwen2.5-Omni: its 300 s feature extractor merged with the image processor's settings, and
    `chat_template.jinja`, and the tokenizer attributes its processor reads (`<|IMAGE|>`,
    `<|VIDEO|>`, `<|vision_bos|>`, `<|vision_eos|>` become ids past the tiny model's vocabulary;
    no prompt here holds them). `generation` replaces the generation config's settings.
    """
    shutil.copytree(source, out)
    omni = json.loads((out / "config.json").read_text())["model_type"] != "qwen2_audio"
    extractor = WhisperFeatureExtractor(feature_size=128, chunk_length=300 if omni else 30)
    preprocessor = {**extractor.to_dict(), "processor_class": "Qwen2AudioProcessor"}
    if omni:
        preprocessor |= {
            "processor_class": "Qwen2_5OmniProcessor",
            "image_processor_type": "Qwen2VLImageProcessor",
            "patch_size": 14,
            "merge_size": 2,
            "temporal_patch_size": 2,
            "min_pixels": 3136,
            "max_pixels": 12845056,
        }
        tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
        tokenizer_config["extra_special_tokens"] = OMNI_TOKENS
        (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
        (out / "chat_template.jinja").write_text(template or OMNI_TEMPLATE)
    else:
        chat = {"chat_template": template or QWEN2_AUDIO_TEMPLATE}
        (out / "chat_template.json").write_text(json.dumps(chat))
    (out / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    if generation is not None:
        config = GenerationConfig.from_pretrained(out).to_dict() | generation
        GenerationConfig(**config).save_pretrained(out)
    return out


def transformers_processor(directory: Path) -> Any:
    """`AutoProcessor.from_pretrained(directory)`: what a transformers user prompts with.

    Qwen2.5-Omni's processor also loads a video processor, which needs torchvision (not an
    as2d dependency). Without it, the same processor class is built from the same files with
    no video processor: audio and text never reach it.
    """
    try:
        return AutoProcessor.from_pretrained(directory)
    except ImportError:
        pass
    template = ProcessorMixin.get_processor_dict(directory)[0]["chat_template"]

    def check(self: Any, name: str, argument: Any) -> Any:
        if name == "video_processor" and argument is None:
            return None
        return ProcessorMixin.check_argument_for_proper_class(self, name, argument)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Qwen2_5OmniProcessor, "check_argument_for_proper_class", check)
        return Qwen2_5OmniProcessor(
            image_processor=AutoImageProcessor.from_pretrained(directory),
            video_processor=None,
            feature_extractor=AutoFeatureExtractor.from_pretrained(directory),
            tokenizer=AutoTokenizer.from_pretrained(directory),
            chat_template=template,
        )


def processor_inputs(processor: Any, request_text: str) -> Any:
    """The processor's model inputs for the audio and one user turn, as a model card does."""
    content = [{"type": "audio"}, {"type": "text", "text": request_text}]
    text = processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    return processor(text=text, audio=AUDIO, sampling_rate=16_000, return_tensors="pt")


def as2d_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if str(w.message).startswith("as2d:")]


def load_quietly(directory: Path) -> Any:
    """`load_target`, asserting that as2d warned about nothing."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target = load_target(str(directory))
    assert as2d_warnings(caught) == []
    return target


@pytest.fixture(scope="module")
def released(
    tiny_qwen_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Each family saved as released, keyed by `config.model_type`."""
    root = tmp_path_factory.mktemp("released")
    return {f: save_as_released(tiny_qwen_dirs[f], root / f) for f in FAMILIES}


@pytest.fixture(scope="module", params=FAMILIES)
def loaded(request: pytest.FixtureRequest, released: dict[str, Path]) -> tuple[str, Any, Any]:
    """(family, target, transformers' processor) of one released checkpoint."""
    directory = released[request.param]
    return request.param, load_quietly(directory), transformers_processor(directory)


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: f"{r.task}-{r.language}")
def test_prompt_equals_the_processors(loaded, request_: Request) -> None:
    _, target, processor = loaded
    expected = processor_inputs(processor, target.request_text(request_)).input_ids[0].tolist()
    assert target.prompt(target.encode(AUDIO), request_) == expected


def test_features_equal_the_processors(loaded) -> None:
    """Equal on the window's frames; Qwen2.5-Omni's processor pads to 300 s, as2d to 30 s."""
    family, target, processor = loaded
    inputs = processor_inputs(processor, "Transcribe the audio.")
    encoded = target.encode(AUDIO)
    frames = int(encoded.mask.sum())
    assert frames == int(inputs.feature_attention_mask.sum()) == 300
    assert torch.equal(encoded.mask, inputs.feature_attention_mask[:, :3000])
    torch.testing.assert_close(
        encoded.features[..., :frames], inputs.input_features[..., :frames], rtol=0, atol=0
    )
    if family == "qwen2_audio":
        assert torch.equal(encoded.features, inputs.input_features)
    assert encoded.audio_tokens == inputs.input_ids[0].tolist().count(target.audio_id) == 75


def test_scores_equal_the_models_on_the_processors_inputs(loaded) -> None:
    """End to end: as2d's encode, prompt, prefill and forward score as the model's own forward
    does on the processor's inputs (its features padded to its own length), 8 tokens on."""
    _, target, processor = loaded
    request = REQUESTS[0]
    inputs = processor_inputs(processor, target.request_text(request))
    after = [5, 17, 42, 99, 7, 250, 3, 64]  # any tokens after the prompt
    ids = torch.cat([inputs.input_ids, torch.tensor([after])], 1)  # [1, n + 8]
    expected = target.model(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        input_features=inputs.input_features,
        feature_attention_mask=inputs.feature_attention_mask,
    ).logits[0, -len(after) - 1 :]  # [9, V]
    encoded = target.encode(AUDIO)
    first = target.prefill(encoded, target.prompt(encoded, request))  # [V]
    scores = torch.cat([first[None], target.forward(after)])  # [9, V]
    torch.testing.assert_close(scores, expected.float(), rtol=1e-5, atol=1e-4)


def test_language_names_the_spoken_language(loaded) -> None:
    _, target, _ = loaded
    texts = {
        (task, language): target.prompt_text(Request(task, language))
        for task in ("transcribe", "translate")
        for language in (None, "fr", "German")
    }
    assert "Transcribe the audio." in texts["transcribe", None]
    assert "Transcribe the French audio." in texts["transcribe", "fr"]
    assert "Transcribe the German audio." in texts["transcribe", "German"]
    assert "Translate the speech into English." in texts["translate", None]
    assert "Translate the French speech into English." in texts["translate", "fr"]
    assert len(set(texts.values())) == len(texts)


def test_encode_runs_the_audio_tower(loaded) -> None:
    """Encode time covers the audio tower; the prefill runs only the decoder."""
    _, target, _ = loaded
    calls: list[str] = []
    tower = target.model.model.audio_tower
    hook = tower.register_forward_hook(lambda *_: calls.append("tower"))
    try:
        encoded = target.encode(AUDIO)
        assert calls == ["tower"]
        target.prefill(encoded, target.prompt(encoded, Request("transcribe")))
        assert calls == ["tower"]
    finally:
        hook.remove()


@pytest.mark.parametrize("family", FAMILIES)
def test_a_fine_tuned_template_is_followed(
    family: str, tiny_qwen_dirs: dict[str, Path], tmp_path: Path
) -> None:
    directory = save_as_released(tiny_qwen_dirs[family], tmp_path / family, TUNED_TEMPLATE)
    target = load_quietly(directory)
    request = Request("transcribe", "en")
    expected = processor_inputs(transformers_processor(directory), "Transcribe the English audio.")
    prompt = target.prompt(target.encode(AUDIO), request)
    assert prompt == expected.input_ids[0].tolist()
    text = target.tokenizer.hf.decode(prompt)
    assert text.startswith("<|im_start|>system\nYou transcribe phone calls.<|im_end|>\n")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_sampling_generation_config_warns_once(
    family: str, tiny_qwen_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """Qwen2-Audio-7B-Instruct's generation config samples: as2d says once that it won't."""
    directory = save_as_released(tiny_qwen_dirs[family], tmp_path / family, generation=SAMPLING)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target = load_target(str(directory))
    [message] = as2d_warnings(caught)
    assert "do_sample=True, repetition_penalty=1.1" in message
    assert "greedily" in message and "\n" not in message
    assert target.max_new_tokens == 40  # the rest of the generation config still applies


@pytest.mark.parametrize("family", FAMILIES)
def test_a_checkpoint_without_processor_files_gets_the_builtin_prompt(
    family: str, tiny_qwen_dirs: dict[str, Path]
) -> None:
    """No chat template, no preprocessor_config.json: one warning line, and the prompt as2d
    used before reading templates (for Qwen2-Audio, also its processor's default)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target = load_target(str(tiny_qwen_dirs[family]))
    [message] = as2d_warnings(caught)
    assert "no chat template and no preprocessor_config.json" in message
    assert "\n" not in message
    text = target.prompt_text(Request("transcribe"))
    system = "You are a helpful assistant."
    audio = "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\n"
    if family == "qwen2_5_omni_thinker":
        system = (
            "You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, capable "
            "of perceiving auditory and visual inputs, as well as generating text and speech."
        )
        audio = "<|audio_bos|><|AUDIO|><|audio_eos|>"
    assert text == (
        f"<|im_start|>system\n{system}<|im_end|>\n"
        f"<|im_start|>user\n{audio}Transcribe the audio.<|im_end|>\n<|im_start|>assistant\n"
    )
    if family == "qwen2_audio":  # the processor's default template, given no other
        tokenizer = AutoTokenizer.from_pretrained(tiny_qwen_dirs[family])
        processor = Qwen2AudioProcessor(WhisperFeatureExtractor(feature_size=128), tokenizer)
        expected = processor_inputs(processor, "Transcribe the audio.").input_ids[0].tolist()
        assert target.prompt(target.encode(AUDIO), Request("transcribe")) == expected


def test_not_greedy_names_what_changes_greedy_output() -> None:
    assert not_greedy(GenerationConfig(max_new_tokens=40)) == []
    assert not_greedy(GenerationConfig(temperature=0.7, top_p=0.5)) == []  # no sampling
    assert not_greedy(GenerationConfig(num_beams=4, no_repeat_ngram_size=3)) == [
        "num_beams=4",
        "no_repeat_ngram_size=3",
    ]
    assert not_greedy(GenerationConfig(**SAMPLING)) == ["do_sample=True", "repetition_penalty=1.1"]


def test_weights_load_onto_the_gpu_directly() -> None:
    assert device_map("cpu") is None
    assert device_map("cuda") == "cuda"
    assert device_map("cuda:1") == "cuda:1"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("family", FAMILIES)
def test_a_released_checkpoint_decodes_on_the_gpu(family: str, released: dict[str, Path]) -> None:
    target = load_target(str(released[family]), "cuda")
    assert isinstance(target, ChatAudioTarget)
    assert {p.device.type for p in target.model.parameters()} == {"cuda"}
    encoded = target.encode(AUDIO)
    prompt = target.prompt(encoded, Request("transcribe"))
    ids = torch.tensor([prompt], device="cuda")
    generated = target.model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        input_features=encoded.features,
        feature_attention_mask=encoded.mask,
        do_sample=False,
    )[0, len(prompt) :].tolist()
    tokens = decode_target_only(target, encoded, prompt)
    assert tokens == [t for t in generated if t not in target.eot_ids]

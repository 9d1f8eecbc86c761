"""The CPU -> settings choice (voice_pipeline/tuning.py): pure, table-driven, no model."""

from __future__ import annotations

import pytest

from voice_pipeline.config import ASRConfig, LLMConfig, TurnConfig
from voice_pipeline.cpu import CPUClass, CPUInfo, parse_cpu, this_cpu
from voice_pipeline.tuning import (
    SLOW_TOKEN_MS,
    Source,
    choose,
    choose_first_chunk_words,
    choose_partial_interval,
)

# flags lines as /proc/cpuinfo shows them (trimmed to what matters plus some noise)
BASE = "fpu vme de pse tsc msr pae mce cx8 apic sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c"
EPYC_BF16 = f"{BASE} avx2 bmi2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16 avx512_vnni"
EPYC_AVX2 = f"{BASE} avx2 bmi1 bmi2 sha_ni clzero"
SKYLAKE_X = f"{BASE} avx2 avx512f avx512dq avx512cd avx512bw avx512vl"
SAPPHIRE = f"{BASE} avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8"
AMX_ONLY = f"{BASE} avx2 avx512f amx_bf16 amx_tile"
OLD = f"{BASE}"


def cpuinfo(model: str, flags: str, processors: int = 2) -> str:
    block = f"processor\t: {{n}}\nvendor_id\t: X\nmodel name\t: {model}\nflags\t\t: {flags}\n\n"
    return "".join(block.format(n=n) for n in range(processors))


EPYC_INFO = cpuinfo("AMD EPYC", EPYC_BF16)
ARM_BF16 = "processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd evtstrm aes sve bf16 i8mm\n"
ARM_PLAIN = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes crc32\n"


@pytest.mark.parametrize(
    ("text", "machine", "env", "klass", "bf16"),
    [
        (cpuinfo("AMD EPYC", EPYC_BF16), "x86_64", {}, CPUClass.AVX512_BF16, True),
        (cpuinfo("AMD EPYC", EPYC_AVX2), "x86_64", {}, CPUClass.AVX2, False),
        (cpuinfo("Intel Xeon Gold 6154", SKYLAKE_X), "x86_64", {}, CPUClass.AVX512, False),
        (cpuinfo("Intel Xeon Platinum 8480+", SAPPHIRE), "x86_64", {}, CPUClass.AVX512_BF16, True),
        (cpuinfo("Some AMX part", AMX_ONLY), "x86_64", {}, CPUClass.AVX512_BF16, True),
        (cpuinfo("Intel Core 2", OLD), "x86_64", {}, CPUClass.OLDER, False),
        ("", "x86_64", {}, CPUClass.OLDER, False),  # unreadable: the weakest class
        (ARM_BF16, "aarch64", {}, CPUClass.ARM_BF16, True),
        (ARM_PLAIN, "aarch64", {}, CPUClass.ARM, False),
        # emulation: oneDNN capped below the CPU's own class
        (cpuinfo("AMD EPYC", EPYC_BF16), "x86_64", {"ONEDNN_MAX_CPU_ISA": "AVX2"}, CPUClass.AVX2, False),
        (EPYC_INFO, "x86_64", {"DNNL_MAX_CPU_ISA": "avx512_core"}, CPUClass.AVX512, False),
        # the one switch (voice_pipeline/emulation.py), which wins over a oneDNN cap
        (EPYC_INFO, "x86_64", {"VP_EMULATE_CPU": "avx2"}, CPUClass.AVX2, False),
        (EPYC_INFO, "x86_64", {"VP_EMULATE_CPU": "AVX512"}, CPUClass.AVX512, False),
        (EPYC_INFO, "x86_64", {"VP_EMULATE_CPU": "avx2", "ONEDNN_MAX_CPU_ISA": "ALL"}, CPUClass.AVX2, False),
        (cpuinfo("AMD EPYC", EPYC_AVX2), "x86_64", {"VP_EMULATE_CPU": "avx2"}, CPUClass.AVX2, False),
        # a cap at or above the CPU's class, or one oneDNN does not know, changes nothing
        (cpuinfo("AMD EPYC", EPYC_AVX2), "x86_64", {"ONEDNN_MAX_CPU_ISA": "ALL"}, CPUClass.AVX2, False),
        (EPYC_INFO, "x86_64", {"ONEDNN_MAX_CPU_ISA": "nonsense"}, CPUClass.AVX512_BF16, True),
    ],
)
def test_cpu_class(text: str, machine: str, env: dict[str, str], klass: CPUClass, bf16: bool) -> None:
    cpu = parse_cpu(text, 2, env, machine)
    assert cpu.cpu_class is klass
    assert cpu.bf16_native is bf16


def test_labels_name_the_class_the_cores_and_any_emulation() -> None:
    real = parse_cpu(cpuinfo("AMD EPYC", EPYC_AVX2), 2, {})
    assert real.label == "AVX2, 2 cores (AMD EPYC)"
    assert real.emulation is None and real.native_class is None
    emulated = parse_cpu(cpuinfo("AMD EPYC", EPYC_BF16), 2, {"VP_EMULATE_CPU": "avx2"})
    assert emulated.label == "AVX2 (emulated on AVX-512 BF16), 2 cores (AMD EPYC)"
    assert emulated.class_label == "AVX2 (emulated on AVX-512 BF16)"
    assert emulated.emulation == "VP_EMULATE_CPU=avx2"
    assert emulated.as_dict()["class"] == "AVX2" and emulated.as_dict()["native_class"] == "AVX-512 BF16"
    assert emulated.as_dict()["class_label"] == "AVX2 (emulated on AVX-512 BF16)"
    onednn_only = parse_cpu(cpuinfo("AMD EPYC", EPYC_BF16), 2, {"ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert onednn_only.label == "AVX2 (emulated on AVX-512 BF16), 2 cores (AMD EPYC)"
    assert onednn_only.emulation == "ONEDNN_MAX_CPU_ISA=AVX2"
    assert parse_cpu(cpuinfo("AMD EPYC", EPYC_BF16), 1, {}).label.endswith("1 core (AMD EPYC)")


def _cpu(flags: str, cores: int) -> CPUInfo:
    return parse_cpu(cpuinfo("CPU", flags, cores), cores, {})


AUTO_LLM = LLMConfig()
AUTO_ASR = ASRConfig()


@pytest.mark.parametrize(
    ("flags", "cores", "dtype", "llm_threads", "asr_threads", "block"),
    [
        (EPYC_BF16, 2, "bfloat16", 1, 2, 32),
        (EPYC_AVX2, 2, "float32", 1, 1, 32),  # the CI machine: bf16 is emulated there, 4x slower
        (SKYLAKE_X, 2, "float32", 1, 2, 32),
        (SAPPHIRE, 8, "bfloat16", 4, 2, 32),
        (EPYC_AVX2, 1, "float32", 1, 1, 32),
        (EPYC_AVX2, 3, "float32", 1, 1, 32),  # AVX2: one Whisper thread decodes faster
        (EPYC_AVX2, 4, "float32", 2, 1, 32),
        (EPYC_BF16, 16, "bfloat16", 8, 2, 32),
        (OLD, 2, "float32", 1, 1, 32),
    ],
)
def test_auto_choices(
    flags: str, cores: int, dtype: str, llm_threads: int, asr_threads: int, block: int
) -> None:
    t = choose(_cpu(flags, cores), AUTO_LLM, AUTO_ASR)
    got = (t.dtype, t.llm_threads, t.asr_threads, t.kv_block_tokens)
    assert got == (dtype, llm_threads, asr_threads, block)
    assert all(c.source is Source.MACHINE and c.reason for c in t.choices)
    resolved = t.llm(AUTO_LLM)
    assert (resolved.dtype, resolved.threads, resolved.kv_block_tokens) == (dtype, llm_threads, block)
    assert t.asr(AUTO_ASR).cpu_threads == asr_threads
    # two Whisper decodes at once wherever there is a second core (sessions ending together)
    assert t.asr_workers == t.asr(AUTO_ASR).num_workers == (1 if cores == 1 else 2)
    assert t.as_dict()["asr_workers"] == t.asr_workers


@pytest.mark.parametrize(
    ("flags", "env", "compile_"),
    [
        (EPYC_BF16, {}, "compile"),
        (EPYC_AVX2, {}, "compile"),
        (EPYC_BF16, {"VP_EMULATE_CPU": "avx2"}, "compile"),  # what the emulated class gets
        (SKYLAKE_X, {}, "eager"),  # not measured there
        (OLD, {}, "eager"),
    ],
)
def test_torch_compile_where_it_was_measured_to_pay(flags: str, env: dict[str, str], compile_: str) -> None:
    cpu = parse_cpu(cpuinfo("CPU", flags), 2, env)
    t = choose(cpu, AUTO_LLM, AUTO_ASR)
    assert t.compile == compile_ and t.llm(AUTO_LLM).compile == compile_
    (choice,) = [c for c in t.choices if c.key == "llm.compile"]
    assert choice.source is Source.MACHINE and choice.reason
    assert ("torch.compile" in t.settings_label()) is (compile_ == "compile")
    assert choose(cpu, LLMConfig(compile="eager"), AUTO_ASR).compile == "eager"  # the config wins


@pytest.mark.parametrize("flags", [EPYC_BF16, EPYC_AVX2, OLD])
def test_an_explicit_config_value_always_wins(flags: str) -> None:
    llm = LLMConfig(dtype="bfloat16", threads=2, kv_block_tokens=64, compile="eager")
    t = choose(_cpu(flags, 2), llm, ASRConfig(cpu_threads=1, num_workers=1))
    assert (t.dtype, t.llm_threads, t.asr_threads, t.kv_block_tokens) == ("bfloat16", 2, 1, 64)
    assert t.asr_workers == t.asr(ASRConfig()).num_workers == 1
    assert t.compile == "eager" and t.llm(LLMConfig()).compile == "eager"
    assert all(c.source is Source.CONFIG for c in t.choices)
    assert "set in the config" in t.summary()


def test_the_log_line_says_what_and_why() -> None:
    t = choose(_cpu(EPYC_AVX2, 2), AUTO_LLM, AUTO_ASR)
    line = t.summary()
    assert line.startswith("machine: AVX2, 2 cores (CPU); ")
    assert "llm.dtype=float32 (AVX2: no bf16 in hardware" in line
    assert "llm.threads=1" in line and "asr.cpu_threads=1" in line and "llm.kv_block_tokens=32" in line
    assert "asr.num_workers=2 (sessions that end turns together decode at once)" in line
    assert t.as_dict()["llm_dtype"] == "float32" and t.as_dict()["cpu"]["class"] == "AVX2"  # type: ignore[index]


@pytest.mark.parametrize(
    ("flags", "cores", "configured", "start"),
    [
        (EPYC_BF16, 2, "auto", "words"),  # the words are back in ~150 ms: the model after them
        (SKYLAKE_X, 2, "auto", "words"),
        (EPYC_AVX2, 2, "auto", "early"),  # the words come 300-500 ms in: the model at once
        (OLD, 2, "auto", "early"),
        (EPYC_AVX2, 1, "auto", "words"),  # one core: nothing to run it beside
        (EPYC_AVX2, 2, "words", "words"),
        (EPYC_BF16, 2, "pause", "pause"),
    ],
)
def test_the_turn_model_starts_where_its_verdict_comes_in_time(
    flags: str, cores: int, configured: str, start: str
) -> None:
    turn = TurnConfig(model_start=configured)  # type: ignore[arg-type]
    t = choose(_cpu(flags, cores), AUTO_LLM, AUTO_ASR, turn)
    assert t.turn_model_start == start
    (choice,) = [c for c in t.choices if c.key == "turn.model_start"]
    assert choice.source is (Source.MACHINE if configured == "auto" else Source.CONFIG)
    # without a turn model there is nothing to choose
    bare = choose(_cpu(flags, cores), AUTO_LLM, AUTO_ASR, TurnConfig(model="none"))
    assert "turn.model_start" not in [c.key for c in bare.choices]


def test_remote_llm_names_only_what_is_used() -> None:
    t = choose(_cpu(EPYC_AVX2, 2), LLMConfig(engine="remote", url="http://x/v1"), AUTO_ASR)
    assert [c.key for c in t.choices] == ["asr.cpu_threads", "asr.num_workers"]


def test_this_machine_is_read() -> None:
    cpu = this_cpu()
    assert cpu.cores >= 1 and cpu.model
    assert cpu.cpu_class in CPUClass


@pytest.mark.parametrize(
    ("configured", "ms_per_token", "words"),
    [
        (None, 17.5, 3),  # AVX-512 BF16 EPYC: a word more costs ~18 ms, the phrase reads better
        (None, 45.0, 2),  # AVX-512 BF16 Xeon, AVX2 (emulated or real): a word less to wait for
        (None, SLOW_TOKEN_MS, 2),
        (None, None, 3),  # not measured (engines built by hand, no warm-up)
        (4, 45.0, 4),  # configured wins
        (0, 45.0, 0),  # off
    ],
)
def test_the_first_chunk_follows_the_llms_speed(
    configured: int | None, ms_per_token: float | None, words: int
) -> None:
    assert choose_first_chunk_words(configured, ms_per_token) == words


@pytest.mark.parametrize(("delay_s", "words"), [(0.0, 3), (0.03, 2)])
async def test_warm_up_measures_the_llm_and_every_reply_cuts_by_it(delay_s: float, words: int) -> None:
    """The warm-up's request gives the LLM's pace (a fake streaming one word per ``delay_s``);
    what every reply and speculative reply of a session cuts by follows it."""
    from fakes import FakeLLM, Fakes

    from voice_pipeline.config import Config
    from voice_pipeline.conversation.wiring import chunking, turn_settings

    engines = Fakes(llm=FakeLLM(token_delay_s=delay_s)).engines()
    assert engines.llm_ms_per_token is None
    await engines.warm_up()
    assert engines.llm_ms_per_token is not None
    assert (engines.llm_ms_per_token >= delay_s * 1000) and (
        delay_s > 0 or engines.llm_ms_per_token < SLOW_TOKEN_MS
    )
    cfg = Config()
    assert chunking(engines, cfg.tts).first_chunk_words == words
    assert turn_settings(cfg, engines).prefetch.tts.first_chunk_words == words


@pytest.mark.parametrize(
    ("configured", "max_decode_ms", "decode_ms", "interval"),
    [
        (600, 250, 150.0, 600),  # AVX-512, or AVX2 at full width: the live transcript stays
        (600, 250, 345.0, 0),  # AVX2 at half width (Zen 1): a partial would hold the pause's decode
        (600, 250, 250.0, 600),  # at the line: still on
        (600, 250, None, 600),  # not measured (engines built by hand, no warm-up)
        (600, 0, 900.0, 600),  # 0: partials always
        (0, 250, 100.0, 0),  # partials off stay off
    ],
)
def test_partials_run_only_where_a_decode_is_fast(
    configured: int, max_decode_ms: int, decode_ms: float | None, interval: int
) -> None:
    assert choose_partial_interval(configured, max_decode_ms, decode_ms) == interval


@pytest.mark.parametrize(("delay_s", "partials"), [(0.0, True), (0.3, False)])
async def test_warm_up_times_the_asr_and_a_slow_one_transcribes_without_partials(
    delay_s: float, partials: bool
) -> None:
    """The warm-up decodes a question in the TTS voice (a fake ASR taking ``delay_s``); a
    session's utterances get partials only if that was within ``asr.partials_max_decode_ms``."""
    from fakes import FakeASR, Fakes

    from voice_pipeline.config import Config
    from voice_pipeline.conversation.wiring import turn_settings

    asr = FakeASR(delay_s=delay_s)
    engines = Fakes(asr=asr).engines()
    assert engines.asr_decode_ms is None
    await engines.warm_up()
    assert engines.asr_decode_ms is not None and engines.asr_decode_ms >= delay_s * 1000
    cfg = Config()
    assert turn_settings(cfg, engines).asr.partial_interval_ms == (600 if partials else 0)
    on_always = Config(asr=ASRConfig(partials_max_decode_ms=0))
    assert turn_settings(on_always, engines).asr.partial_interval_ms == 600

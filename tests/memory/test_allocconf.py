"""PYTORCH_CUDA_ALLOC_CONF parsing (simdl.memory.allocconf) and the memplot flag."""

import pytest

from simdl.errors import SimdlError
from simdl.memory.allocator import AllocatorConfig
from simdl.memory.allocconf import parse_alloc_conf, resolve_alloc_conf

MiB = 1024 * 1024


def test_parses_the_modelled_keys():
    c = parse_alloc_conf("expandable_segments:True,max_split_size_mb:128, roundup_power2_divisions:4")
    assert c == AllocatorConfig(max_split_size_bytes=128 * MiB, roundup_power2_divisions=4, expandable_segments=True)
    assert parse_alloc_conf("") == AllocatorConfig()
    assert parse_alloc_conf("expandable_segments:False") == AllocatorConfig()


@pytest.mark.parametrize(
    "text, words",
    [
        ("garbage_collection_threshold:0.6", "accepted: expandable_segments"),
        ("expandable_segments:yes", "True and False"),
        ("max_split_size_mb:19", ">= 20"),
        ("max_split_size_mb:big", "not an integer"),
        ("roundup_power2_divisions:3", "powers of two"),
        ("max_split_size_mb", "needs a value"),
    ],
)
def test_bad_options_name_what_is_accepted(text, words):
    with pytest.raises(SimdlError, match=words):
        parse_alloc_conf(text)


def test_flag_wins_over_environment_and_the_source_is_named():
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    conf, source = resolve_alloc_conf(None, env)
    assert conf == AllocatorConfig(expandable_segments=True) and "PYTORCH_CUDA_ALLOC_CONF" in source
    conf, source = resolve_alloc_conf("max_split_size_mb:64", env)
    assert conf == AllocatorConfig(max_split_size_bytes=64 * MiB) and source.startswith("--cuda-alloc-conf")
    conf, source = resolve_alloc_conf(None, {})
    assert conf is None and "defaults" in source


def test_cli_rejects_an_unknown_key_with_exit_2(capsys, tmp_path):
    from simdl.cli import main

    rc = main(
        [
            "memplot",
            "--model",
            "vgg16",
            "--strategy",
            "fsdp",
            "--gpus",
            "4",
            "-o",
            str(tmp_path / "m.png"),
            "--cuda-alloc-conf",
            "pinned_use_cuda_host_register:True",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "accepted: expandable_segments" in err and "Traceback" not in err

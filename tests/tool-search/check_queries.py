"""Check queries.json against tools.json and print its counts.

usage: python3 tests/tool-search/check_queries.py [--overlap]

Fails (exit 1) when a (server, tool) label is not in tools.json, an id repeats or is
malformed, a field is missing or of the wrong type, or a target is missed:
>= 260 queries, >= 165 confusable, >= 30 in Chinese, >= 150 distinct tools, every server.
--overlap also lists the English queries that share a word with their tool's name.
"""

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGETS = {"total": 260, "confusable": 165, "zh": 30, "distinct_tools": 150}
# Words of a tool name that only say which product it belongs to, or carry no meaning.
NEUTRAL = {
    "jira", "confluence", "linear", "slack", "browser", "kubectl", "git", "api", "a", "an",
    "the", "to", "from", "in", "on", "of", "by", "with", "mongodb", "redis", "sentry", "helm",
    "stripe", "notion", "github", "gitlab", "supabase",
}


def words(text: str) -> set[str]:
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    out = set()
    for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()):
        if len(w) < 3:
            continue
        for suffix in ("ies", "es", "s", "ing", "ed"):
            if w.endswith(suffix) and len(w) - len(suffix) >= 3:
                w = w[: -len(suffix)] + ("y" if suffix == "ies" else "")
                break
        out.add(w)
    return out


def main() -> int:
    tools = json.loads((HERE / "tools.json").read_text())
    queries = json.loads((HERE / "queries.json").read_text())
    known = {(s["name"], t["name"]) for s in tools["servers"] for t in s["tools"]}
    servers = [s["name"] for s in tools["servers"]]
    errors = []

    ids = Counter(q.get("id") for q in queries)
    for qid, n in ids.items():
        if n > 1:
            errors.append(f"duplicate id {qid}")
    texts = Counter(q.get("query", "").strip().lower() for q in queries)
    for text, n in texts.items():
        if n > 1:
            errors.append(f"duplicate query text: {text!r}")
    for q in queries:
        qid = q.get("id")
        if set(q) != {"id", "query", "server", "tool", "lang", "confusable"}:
            errors.append(f"{qid}: fields {sorted(q)}")
        if not isinstance(qid, str) or not re.fullmatch(r"q\d{3,}", qid):
            errors.append(f"{qid}: malformed id")
        if (q.get("server"), q.get("tool")) not in known:
            errors.append(f"{qid}: unknown tool {q.get('server')}/{q.get('tool')}")
        if q.get("lang") not in ("en", "zh"):
            errors.append(f"{qid}: lang {q.get('lang')!r}")
        if not isinstance(q.get("confusable"), bool):
            errors.append(f"{qid}: confusable must be true/false")
        if not isinstance(q.get("query"), str) or len(q["query"].strip()) < 4:
            errors.append(f"{qid}: empty query")
        if q.get("lang") == "zh" and not re.search(r"[\u4e00-\u9fff]", q.get("query", "")):
            errors.append(f"{qid}: lang zh but no Chinese characters")
        if q.get("lang") == "en" and re.search(r"[\u4e00-\u9fff]", q.get("query", "")):
            errors.append(f"{qid}: lang en but has Chinese characters")

    distinct = {(q["server"], q["tool"]) for q in queries}
    per_server = Counter(q["server"] for q in queries)
    counts = {
        "total": len(queries),
        "confusable": sum(1 for q in queries if q.get("confusable") is True),
        "zh": sum(1 for q in queries if q.get("lang") == "zh"),
        "distinct_tools": len(distinct),
    }
    for key, minimum in TARGETS.items():
        if counts[key] < minimum:
            errors.append(f"{key}: {counts[key]} < {minimum}")
    missing = [s for s in servers if per_server[s] == 0]
    if missing:
        errors.append(f"servers without a query: {missing}")

    print(
        f"queries: {counts['total']}  confusable: {counts['confusable']}  zh: {counts['zh']}  "
        f"distinct tools: {counts['distinct_tools']} of {len(known)}  "
        f"servers: {len([s for s in servers if per_server[s]])} of {len(servers)}"
    )
    for s in servers:
        n_tools = sum(1 for k in known if k[0] == s)
        covered = sum(1 for k in distinct if k[0] == s)
        print(f"  {s:<20} {per_server[s]:>4} queries  {covered:>3}/{n_tools:<3} tools")

    if "--overlap" in sys.argv:
        print("English queries sharing a word with their tool's name:")
        for q in queries:
            if q["lang"] != "en":
                continue
            common = (words(q["tool"]) - words(" ".join(NEUTRAL))) & words(q["query"])
            if common:
                print(f"  {q['id']} {q['server']}/{q['tool']}: {sorted(common)} | {q['query']}")

    for e in errors:
        print("ERROR", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

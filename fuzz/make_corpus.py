#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/): small valid inputs and the
hostile cases of the hardening work (docs/hardening.md). Crashers found by fuzzing are added beside them (named crash-*)."""
import gzip, json, os, struct, sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

def put(target, name, data):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

def st(header, data=b""):
    h = header.encode() if isinstance(header, str) else header
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data

# ---- safetensors_reader
f32x2 = '"dtype":"F32","shape":[2]'
put("safetensors_reader", "valid_two_tensors", st('{"__metadata__":{"format":"pt"},"a":{%s,"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}}' % f32x2, b"\0" * 16))
put("safetensors_reader", "valid_all_dtypes", st(json.dumps({
    "f64": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]},
    "f32": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},
    "i32": {"dtype": "I32", "shape": [1], "data_offsets": [12, 16]},
    "bf16": {"dtype": "BF16", "shape": [1], "data_offsets": [16, 18]},
    "f16": {"dtype": "F16", "shape": [1], "data_offsets": [18, 20]},
    "u8": {"dtype": "U8", "shape": [2, 1], "data_offsets": [20, 22]},
    "b": {"dtype": "BOOL", "shape": [2], "data_offsets": [22, 24]},
}, separators=(",", ":")), b"\1" * 24))
put("safetensors_reader", "empty_header", st("{}"))
put("safetensors_reader", "ignored_fields", st('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[[1,{"y":null}],true,"s"]}}', b"\7"))
put("safetensors_reader", "number_overflow", struct.pack("<Q", 11) + b'{"a":1e309}')
put("safetensors_reader", "deep_nesting", st('{"a":' + "[" * 300))
put("safetensors_reader", "shape_overflow_any_order", st('{"a":{"dtype":"F32","shape":[0,1099511627776,1099511627776],"data_offsets":[0,0]}}'))
put("safetensors_reader", "shape_overflow_product", st('{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}}', b"\0" * 8))
put("safetensors_reader", "overlap", st('{"a":{%s,"data_offsets":[0,8]},"b":{%s,"data_offsets":[4,12]}}' % (f32x2, f32x2), b"\0" * 12))
put("safetensors_reader", "truncated", st('{"a":{%s,"data_offsets":[0,8]}}' % f32x2, b"\0" * 4))
put("safetensors_reader", "duplicate", st('{"a":{%s,"data_offsets":[0,8]},"a":{%s,"data_offsets":[8,16]}}' % (f32x2, f32x2), b"\0" * 16))
put("safetensors_reader", "metadata_not_string", st('{"__metadata__":{"k":[1,2]}}'))
put("safetensors_reader", "header_too_long", struct.pack("<Q", 100000001) + b"{}")
put("safetensors_reader", "tiny", b"\x02\0\0\0")

# ---- idx_reader: first byte = (expected count << 1) | (1 for images, 0 for labels)
def be32(*v): return struct.pack(">" + "I" * len(v), *v)
labels = be32(0x801, 3) + bytes([0, 9, 4])
image = be32(0x803, 1, 28, 28) + bytes(i % 256 for i in range(784))
gz = lambda b: gzip.compress(b, mtime=0)
put("idx_reader", "labels_plain", b"\0" + labels)
put("idx_reader", "labels_gzip", b"\0" + gz(labels))
put("idx_reader", "images_gzip", bytes([(1 << 1) | 1]) + gz(image))
put("idx_reader", "images_plain", bytes([(1 << 1) | 1]) + image)
put("idx_reader", "labels_zero", b"\0" + gz(be32(0x801, 0)))
put("idx_reader", "labels_trailer_cut", b"\0" + gz(labels)[:-4])
put("idx_reader", "labels_trailing_garbage", b"\0" + gz(labels) + b"junk")
put("idx_reader", "labels_two_members", b"\0" + gz(labels) + gz(b"x"))
put("idx_reader", "labels_bad_crc", b"\0" + (lambda g: g[:-8] + bytes([g[-8] ^ 1]) + g[-7:])(gz(labels)))
put("idx_reader", "images_huge_count_plain", bytes([(1 << 1) | 1]) + be32(0x803, 60000, 28, 28) + b"\0" * 100)
put("idx_reader", "labels_bad_value", b"\0" + be32(0x801, 1) + b"\x0a")

# ---- text_data: first byte = mode (0 text, 1 vocabulary, 2/3 uint16/uint32 tokens) | (block_size - 1) << 2 | (vocab_size / 40) << 5
put("text_data", "text_ascii", b"\0" + b"First Citizen:\nBefore we proceed any further, hear me speak.\n")
put("text_data", "text_utf8", b"\0" + "caf\u00e9 \u4e2d\u6587 \U0001F600\t\u202e!\r\n".encode())
put("text_data", "text_empty", b"\0")
put("text_data", "text_nul", b"\0" + b"ab\0c")
put("text_data", "text_latin1", b"\0" + b"caf\xe9")
put("text_data", "text_cut", b"\0" + b"abc\xe4\xb8")
put("text_data", "text_overlong", b"\0" + b"a\xc0\x80")
put("text_data", "text_surrogate", b"\0" + b"a\xed\xa0\x80")
vocab = lambda chars, **extra: json.dumps(dict({"format": "dparallel.CharTokenizer", "version": 1, "vocab_size": len(chars), "chars": chars}, **extra))
put("text_data", "vocab_valid", b"\1" + vocab(["\n", " ", "a", "\u00e9", "\U0001F600"]).encode())
put("text_data", "vocab_unsorted", b"\1" + vocab(["b", "a"]).encode())
put("text_data", "vocab_duplicate", b"\1" + vocab(["a", "a"]).encode())
put("text_data", "vocab_two_chars", b"\1" + vocab(["ab"]).encode())
put("text_data", "vocab_nul", b"\1" + vocab(["\0"]).encode())
put("text_data", "vocab_size_wrong", b"\1" + vocab(["a"], vocab_size=2).encode())
put("text_data", "vocab_deep", b"\1" + b"[" * 300)
put("text_data", "vocab_not_json", b"\1" + b'{"chars": [\x01\x1b\xff]}')
put("text_data", "vocab_wrong_format", b"\1" + b'{"format": "other", "chars": ["a"]}')
u16 = lambda *v: struct.pack("<%dH" % len(v), *v)
u32 = lambda *v: struct.pack("<%dI" % len(v), *v)
put("text_data", "tokens16_valid", bytes([2 | (2 << 2) | (2 << 5)]) + u16(1, 2, 3, 4, 5, 6, 79, 0))
put("text_data", "tokens16_bad_id", bytes([2 | (1 << 2) | (1 << 5)]) + u16(1, 2, 40, 3))
put("text_data", "tokens16_odd_size", bytes([2]) + b"\1\2\3")
put("text_data", "tokens16_short", bytes([2 | (7 << 2)]) + u16(1, 2, 3))
put("text_data", "tokens16_empty", bytes([2]))
put("text_data", "tokens32_valid", bytes([3 | (1 << 2)]) + u32(70000, 1, 2**32 - 1))
put("text_data", "tokens32_bad_id", bytes([3 | (7 << 5)]) + u32(1, 280, 2))
put("text_data", "tokens32_six_bytes", bytes([3]) + b"\0" * 6)

# ---- checkpoint_metadata: the "dp_train" metadata of a dp-train checkpoint
def meta(**over):
    m = {"version": 1,
         "settings": {"model": "seed", "hidden": 256, "data": "random", "data-dir": "/usr/share/datasets/fashion-mnist",
                      "data-size": 100, "epochs": 2, "steps": 0, "batch-size": 30, "optimizer": "sgd", "lr": 0.05,
                      "momentum": 0.0, "weight-decay": 0.0, "schedule": "cosine", "seed": 0, "shuffle": True},
         "position": {"global_step": 4, "epoch": 1, "batch": 0},
         "train_seconds": 0.5, "epoch_seconds": 0.0, "wall_seconds": 1.0,
         "generators": [{"device": "cpu", "seed": 0, "offset": 128}, {"device": "cpu:0", "seed": 1, "offset": 0}],
         "history": {"step_loss": [0.7, 0.6, 0.5, 0.4], "evals": [{"step": 4, "test_accuracy": 0.8, "test_loss": 0.45, "train_loss": 0.55}],
                     "epoch_seconds": [0.5]},
         "world_size": 1,
         "scheduler": {"last_epoch": 4, "step_count": 5, "base_lrs": [0.05], "last_lrs": [0.025]}}
    for k, v in over.items():
        path = k.split("__")
        d = m
        for p in path[:-1]: d = d[p]
        d[path[-1]] = v
    return json.dumps(m, separators=(",", ":"))
put("checkpoint_metadata", "valid", meta())
put("checkpoint_metadata", "batch_size_zero", meta().replace('"batch-size":30', '"batch-size":0'))
put("checkpoint_metadata", "data_size_zero", meta().replace('"data-size":100', '"data-size":0'))
put("checkpoint_metadata", "empty_history", meta(history__step_loss=[]))
put("checkpoint_metadata", "short_history", meta(history__step_loss=[0.7]))
put("checkpoint_metadata", "unknown_optimizer", meta(settings__optimizer="lamb"))
put("checkpoint_metadata", "bad_generator", meta(generators=[{"device": "gpu", "seed": -1}]))
put("checkpoint_metadata", "position_inconsistent", meta(position={"global_step": 4, "epoch": 0, "batch": 9}))
put("checkpoint_metadata", "epochs_huge", meta().replace('"epochs":2', '"epochs":9223372036854775807'))
put("checkpoint_metadata", "deep", '{"version":1,"settings":' + "[" * 200)
put("checkpoint_metadata", "number_overflow", '{"version":1e309}')
put("checkpoint_metadata", "not_json", "{version")

# ---- store_protocol: the first byte is the mode (0 open store, 1 stranger on the token store, 2
# after a valid handshake), the rest the bytes sent (tcp_store_protocol.h's frames)
def frame(t, body=b""): return bytes([t]) + struct.pack("<I", len(body)) + body
def fld(b): return struct.pack("<I", len(b)) + (b.encode() if isinstance(b, str) else b)
def keys(*ks): return struct.pack("<I", len(ks)) + b"".join(fld(k) for k in ks)
ms = lambda v: struct.pack("<Q", v)
requests = (frame(2, fld("a") + fld("1")) + frame(3, fld("a") + ms(10)) + frame(4, fld("n") + struct.pack("<q", 5)) +
            frame(5, fld("a") + fld("1") + fld("2")) + frame(6, keys("a", "b")) + frame(7, keys("a", "n") + ms(10)) +
            frame(8, fld("a")) + frame(9))
for mode, name in ((0, "open"), (2, "authenticated")):
    put("store_protocol", name + "_every_command", bytes([mode]) + requests)
    put("store_protocol", name + "_parked_wait_then_write", bytes([mode]) + frame(7, keys("x", "y") + ms(50)) + frame(2, fld("x") + fld("")))
    put("store_protocol", name + "_add_to_text", bytes([mode]) + frame(2, fld("t") + fld("text")) + frame(4, fld("t") + struct.pack("<q", 1)))
    put("store_protocol", name + "_add_overflow", bytes([mode]) + frame(4, fld("o") + struct.pack("<q", 2**63 - 1)) + frame(4, fld("o") + struct.pack("<q", 1)))
    put("store_protocol", name + "_over_the_limits", bytes([mode]) + frame(2, fld("k" * 300) + fld("v")) + frame(2, fld("k") + fld("v" * 5000)) +
        frame(6, keys(*[str(i) for i in range(20)])))
    put("store_protocol", name + "_huge_length", bytes([mode]) + bytes([2]) + struct.pack("<I", 0xFFFFFFFF))
    put("store_protocol", name + "_impossible_key_count", bytes([mode]) + frame(7, struct.pack("<I", 0xFFFFFFF0) + b"\0" * 8))
    put("store_protocol", name + "_field_overruns", bytes([mode]) + frame(2, struct.pack("<I", 100) + b"abc"))
    put("store_protocol", name + "_unknown_command", bytes([mode]) + frame(0xEE))
put("store_protocol", "stranger_request_first", bytes([1]) + frame(2, fld("planted") + fld("x")))
put("store_protocol", "stranger_wrong_proof", bytes([1]) + frame(10, b"\x11" * 64))
put("store_protocol", "stranger_short_auth", bytes([1]) + frame(10, b"\x11" * 10))
put("store_protocol", "stranger_half_header", bytes([1]) + b"\x0a\x40")
put("store_protocol", "empty", bytes([0]))

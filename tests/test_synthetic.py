import json

from captioning.data.synthetic import (
    COLOURS,
    POSITIONS,
    SHAPES,
    SINGLE_TEMPLATES,
    SIZES,
    SyntheticConfig,
    generate,
)
from captioning.metrics import attribute_accuracy

CFG = SyntheticConfig(num_train=60, num_val=10, num_test=30, image_size=96, seed=3)


def _load(path):
    return json.loads(path.read_text())


def test_deterministic_and_keyed(tmp_path):
    a = _load(generate(tmp_path / "a", CFG))
    b = _load(generate(tmp_path / "b", CFG))
    assert a == b
    other = SyntheticConfig(**{**CFG.__dict__, "seed": 4})
    assert other.key() != CFG.key()
    assert _load(generate(tmp_path / "a", other))["images"] != a["images"]


def test_every_single_object_phrasing_reads_back_as_its_attributes():
    """Exhaustive over templates, colours, shapes, size words and position phrases: the
    attribute scorer reads every caption the generator can write for one object correctly."""
    from captioning.data.synthetic import POSITION_PHRASES, SIZE_WORDS, tokenize_caption
    from captioning.metrics import parse_attributes

    checked = 0
    for template in SINGLE_TEMPLATES:
        for colour in COLOURS:
            for shape in SHAPES:
                for size in SIZES:
                    for position in POSITIONS:
                        for word in SIZE_WORDS[size]:
                            for where in POSITION_PHRASES[position]:
                                text = template.format(size=word, colour=colour, shape=shape,
                                                       where=where, where_cap=where)
                                got = parse_attributes(tokenize_caption(text))
                                assert got == {"colour": {colour}, "shape": {shape}, "size": {size},
                                               "position": {position}}, text
                                checked += 1
    assert checked > 5000  # the loops ran
    assert parse_attributes(tokenize_caption("a big red square at the top left"))["position"] != {"center"}


def test_karpathy_format_and_ground_truth(tmp_path):
    path = generate(tmp_path, CFG)
    data = _load(path)
    images = data["images"]
    assert [im["split"] for im in images].count("test") == CFG.num_test
    counts = set()
    for im in images:
        assert (path.parent / im["filepath"] / im["filename"]).is_file()
        raws = [s["raw"] for s in im["sentences"]]
        assert len(raws) == 5 and len(set(raws)) == 5, "five different captions"
        assert all(s["tokens"] == s["raw"].split() for s in im["sentences"])
        objs = im["objects"]
        counts.add(len(objs))
        assert 1 <= len(objs) <= 3
        assert len({o["position"] for o in objs}) == len(objs)
        boxes = [o["bbox"] for o in objs]
        for x0, y0, x1, y1 in boxes:
            assert 0 <= x0 < x1 <= CFG.image_size and 0 <= y0 < y1 <= CFG.image_size
        for i, a in enumerate(boxes):  # non-overlapping
            for b in boxes[i + 1 :]:
                assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
    assert counts == {1, 2, 3}


def test_relations_are_true(tmp_path):
    images = _load(generate(tmp_path, CFG))["images"]
    for im in images:
        objs = im["objects"]
        if len(objs) != 2:
            continue
        for s in im["sentences"]:
            raw = s["raw"]
            if " above " in raw:  # the first-named object's row is smaller
                first = raw.split(" above ")[0]
                o = next(o for o in objs if f"{o['colour']} {o['shape']}" in first)
                other = next(x for x in objs if x is not o)
                assert o["row"] < other["row"]


def test_reference_captions_score_perfect_attribute_accuracy(tmp_path):
    images = _load(generate(tmp_path, CFG))["images"]
    for k in range(5):
        caps = [im["sentences"][k]["tokens"] for im in images]
        scores = attribute_accuracy(caps, [im["objects"] for im in images])
        assert scores["attr_acc"] == 1.0
        assert all(v == 1.0 for v in scores.values())

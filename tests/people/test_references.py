"""Reading references the way Ash's resolution table says (pure functions)."""

import pytest

from shared.memory.references import name_from_hint, parse_reference, relation_from_hint


@pytest.mark.parametrize(
    ("reference", "name", "relation"),
    [
        ("my wife", None, "wife"),
        ("Sarah", "Sarah", None),
        ("my wife Sarah", "Sarah", "wife"),
        ("my wife sarah", "Sarah", "wife"),
        ("Sarah, my wife", "Sarah", "wife"),
        ("my best friend Tom", "Tom", "best friend"),
        ("my wife's", None, "wife"),
        ("  My   Boss ", None, "boss"),
        ("boss", None, "boss"),
        ("Mary Jane", "Mary Jane", None),
        ("john", "John", None),
    ],
)
def test_references_split_into_name_and_relation(reference, name, relation):
    ref = parse_reference(reference)
    assert (ref.name, ref.relation) == (name, relation)


def test_a_fact_can_name_the_relation_it_is_about():
    assert name_from_hint("wife", "Remember my wife's name is Sarah") == "Sarah"
    assert name_from_hint("wife", "My wife Sarah likes pasta") == "Sarah"
    assert name_from_hint("wife", "Sarah is my wife") == "Sarah"
    assert name_from_hint("wife", "she likes Italian food") is None
    assert name_from_hint("boss", "my wife's name is Sarah") is None


def test_a_fact_can_give_a_name_its_relation():
    assert relation_from_hint("Sarah", "Sarah is my wife and she is great") == "wife"
    assert relation_from_hint("Michael", "Michael, my boss, hates meetings") == "boss"
    assert relation_from_hint("John", "Sarah and John are getting married") is None
    assert relation_from_hint("Sarah", "Sarah is my favourite singer") is None

"""People through the API: first mention creates, later mentions link, aliases grow."""

import asyncpg

from tests.people.conftest import as_user


async def test_my_wife_then_sarah_is_one_person_with_growing_aliases(text_api):
    api = text_api
    first = await api.ok(
        "/v1/remember", {"content": "My wife's name is Sarah", "subjects": ["my wife"]}
    )
    [subject] = first["memories"][0]["subjects"]
    assert subject["created"] is True
    assert (subject["name"], subject["relation"]) == ("Sarah", "wife")

    again = await api.ok(
        "/v1/remember", {"content": "She likes Italian food", "subjects": ["my wife"]}
    )
    assert again["memories"][0]["subjects"][0]["id"] == subject["id"]
    assert again["memories"][0]["subjects"][0]["created"] is False

    by_name = await api.ok("/v1/people", {"reference": "Sarah"})
    assert by_name["person"]["id"] == subject["id"] and by_name["created"] is False

    both = await api.ok("/v1/people", {"reference": "my wife Sarah"})
    assert both["person"]["id"] == subject["id"]
    assert {a.lower() for a in both["person"]["aliases"]} >= {"my wife", "sarah", "my wife sarah"}

    r = await api.get("/v1/people")
    people = r.json()["people"]
    assert len(people) == 1 and people[0]["name"] == "Sarah" and people[0]["relation"] == "wife"


async def test_a_relation_first_gets_its_name_when_it_is_given_later(text_api):
    api = text_api
    boss = (await api.ok("/v1/people", {"reference": "my boss"}))["person"]
    assert boss["name"] is None and boss["relation"] == "boss"
    named = await api.ok("/v1/people", {"reference": "my boss Michael"})
    assert named["person"]["id"] == boss["id"] and named["changed"][0] == "name"
    assert named["person"]["name"] == "Michael"


async def test_two_names_in_one_fact_link_to_two_people(text_api):
    api = text_api
    out = await api.ok(
        "/v1/remember",
        {"content": "Sarah and John are getting married", "subjects": ["Sarah", "John"]},
    )
    subjects = out["memories"][0]["subjects"]
    assert [s["name"] for s in subjects] == ["Sarah", "John"]
    assert all(s["created"] for s in subjects)
    again = await api.ok(
        "/v1/remember", {"content": "John works at the bakery", "subjects": ["John"]}
    )
    assert again["memories"][0]["subjects"][0]["id"] == subjects[1]["id"]
    people = (await api.get("/v1/people")).json()["people"]
    assert sorted(p["name"] for p in people) == ["John", "Sarah"]


async def test_people_are_private_to_their_owner(text_api, pool, user_id):
    api = text_api
    await api.ok("/v1/people", {"reference": "my wife Sarah"})
    other = await as_user(api.client, pool, user_id + "-other")
    assert (await other.get("/v1/people")).json()["people"] == []
    theirs = await other.ok("/v1/people", {"reference": "Sarah"})
    assert theirs["created"] is True and theirs["person"]["relation"] is None


async def test_bad_references_and_facts_are_4xx_with_a_message(text_api):
    api = text_api
    r = await api.post("/v1/people", {"reference": "   "})
    assert r.status_code == 400 and "does not name a person" in r.json()["detail"]
    r = await api.post("/v1/remember", {})
    assert r.status_code == 422 and "content" in r.json()["detail"]
    r = await api.post("/v1/remember", {"content": "x", "expires_in_days": 0})
    assert r.status_code == 422
    r = await api.post("/v1/remember", {"content": "team standup at 9", "shared": True})
    assert r.status_code == 400 and "chat" in r.json()["detail"]
    r = await api.post("/v1/remember", {"content": "x", "type": "gossip"})
    assert r.status_code == 400 and "type must be one of" in r.json()["detail"]


async def test_concurrent_first_mentions_make_one_person(text_api, pool):
    import asyncio

    api = text_api
    rs = await asyncio.gather(*[api.post("/v1/people", {"reference": "Priya"}) for _ in range(6)])
    assert all(r.status_code == 200 for r in rs), [r.text for r in rs]
    assert len({r.json()["person"]["id"] for r in rs}) == 1
    assert sum(r.json()["created"] for r in rs) == 1
    n = await pool.fetchval("SELECT count(*) FROM people WHERE user_id = $1", api.user_id)
    assert n == 1
    assert isinstance(pool, asyncpg.Pool)

"""Labelled pairs for the supersession rule: (older, newer, the newer supersedes the older).

Contradictions (the same attribute of the same person, another value) must
supersede; near-paraphrases and related-but-compatible statements must not.
"""

from __future__ import annotations

CONTRADICTIONS = [
    ("User's favorite color is red", "User's favorite color is blue"),
    ("Tim lives in Paris", "Tim lives in Berlin"),
    ("Tim works at Google", "Tim works at Microsoft"),
    ("Tim is 34 years old", "Tim is 35 years old"),
    ("Tim's wife is named Sarah", "Tim's wife is named Anna"),
    ("Tim likes sushi", "Tim hates sushi"),
    ("Tim's favorite food is pizza", "Tim's favorite food is tacos"),
    ("The dentist appointment is on Monday", "The dentist appointment is on Friday"),
    ("Tim is single", "Tim is married"),
    ("Tim's phone number is 555-1234", "Tim's phone number is 555-9876"),
    ("Tim's email address is tim@old.com", "Tim's email address is tim@new.org"),
    ("Tim prefers to be called Timmy", "Tim prefers to be called Timo"),
    ("Tim's favorite band is Radiohead", "Tim's favorite band is Coldplay"),
    ("Tim's dog is named Rex", "Tim's dog is named Max"),
    ("Tim works as a teacher", "Tim works as a nurse"),
    ("Tim loves jazz", "Tim can't stand jazz"),
    ("Tim's manager is Alice", "Tim's manager is Bob"),
    ("Tim's favorite movie is Alien", "Tim's favorite movie is Heat"),
    ("Tim's hometown is Boston", "Tim's hometown is Chicago"),
    ("Tim is vegetarian", "Tim is vegan"),
    ("The team meeting is on Tuesday", "The team meeting is on Thursday"),
    ("Tim's birthday is March 3", "Tim's birthday is June 9"),
    ("Tim's favourite drink is coffee", "Tim's favourite drink is green tea"),
    ("Tim's car is a Toyota", "Tim's car is a Honda"),
    ("Tim's time zone is CET", "Tim's time zone is PST"),
    ("Tim enjoys running", "Tim dislikes running"),
    ("Tim's favorite season is winter", "Tim's favorite season is summer"),
    ("Tim's job title is senior engineer", "Tim's job title is engineering manager"),
    ("Tim's partner is named Chris", "Tim's partner is named Sam"),
    ("Tim's flight is on May 3", "Tim's flight is on May 5"),
    ("Tim's favorite sport is tennis", "Tim's favorite sport is golf"),
    ("Caroline's favorite color is green", "Caroline's favorite color is purple"),
]

COMPATIBLE = [
    # near-paraphrases: the same attribute, the same value
    ("User's favorite color is blue", "The user's favourite colour is blue"),
    ("Tim lives in Paris", "Tim is living in Paris"),
    ("Tim likes sushi", "Tim loves sushi"),
    ("Tim works at Google", "Tim is employed at Google"),
    ("Tim is 34 years old", "Tim is 34"),
    ("Tim loves running", "Tim enjoys running"),
    ("Tim's dog is named Rex", "Tim's dog is called Rex"),
    ("Caroline loves creating art", "Caroline loves making art"),
    (
        "Melanie ran a charity race for mental health last Saturday",
        "Melanie ran a charity race for mental health on Saturday",
    ),
    ("Caroline went to an LGBTQ support group", "Caroline attended an LGBTQ support group"),
    # related but compatible
    ("Caroline loves creating art", "Caroline loves that Melanie chose pottery for her art"),
    ("Tim likes sushi", "Tim likes ramen"),
    ("Tim went to a support group yesterday", "Tim went to a pride parade last week"),
    ("Tim has a dog", "Tim has a cat"),
    ("Tim plays the violin", "Tim plays the piano"),
    ("Tim's favorite color is blue", "Tim's favorite food is pizza"),
    ("Tim works at Google", "Tim works on the search team"),
    ("Tim lives in Paris", "Tim visited Berlin last summer"),
    ("Tim ran a charity race", "Tim ran a marathon"),
    ("Tim is reading a book about history", "Tim is reading a book about art"),
    ("Melanie painted a lake sunrise last year", "Melanie painted a sunset this year"),
    ("Tim's sister lives in Rome", "Tim lives in Oslo"),
    ("Tim likes jazz", "Tim likes jazz and blues"),
    ("Tim is learning Spanish", "Tim is learning French"),
    ("Tim went hiking last weekend", "Tim went camping last weekend"),
    ("Tim has two kids", "Tim's kids love the beach"),
    ("Tim bought a new bike", "Tim bought a new helmet"),
    ("Tim enjoys hiking", "Tim enjoys hiking with his dog"),
    ("Tim's daughter started school", "Tim's son started school"),
    ("Tim is training for a marathon", "Tim ran a half marathon in May"),
    ("Tim loves Italian food", "Tim loves Italian movies"),
    ("Tim adopted a cat named Luna", "Tim's cat Luna likes to sleep"),
    ("Tim works at Google", "Tim worked at Google for five years"),
    ("Tim's favorite book is Dune", "Tim just reread Dune"),
    ("Tim's favorite color is red", "Tim painted the fence red"),
    (
        "Caroline's art is about expressing her trans experience",
        "Caroline's art is important to her",
    ),
    ("Caroline is researching adoption agencies", "Caroline chose an adoption agency"),
    (
        "Melanie's kids are excited about summer break",
        "Melanie's kids are excited about going camping",
    ),
]

PAIRS: list[tuple[str, str, bool]] = [(a, b, True) for a, b in CONTRADICTIONS] + [
    (a, b, False) for a, b in COMPATIBLE
]

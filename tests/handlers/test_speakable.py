import pytest
from hypothesis import given
from hypothesis import strategies as st

from handlers.speakable import speakable

pytestmark = pytest.mark.fast
"""No Ray cluster and no model: part of ``make test-fast``."""


SPELLED = {"Mr", "Mrs", "Dr", "Prof", "St", "vs", "approx"}
"""Words some rule changes even without a digit or symbol near."""

WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'’", min_size=1, max_size=12)
GAPS = st.sampled_from([" ", ", ", ". ", "? ", "! ", "; ", ": ", " — ", "… ", "\n"])


@given(st.lists(st.tuples(WORDS.filter(lambda word: word not in SPELLED), GAPS), min_size=1, max_size=20))
def test_plain_prose_passes_unchanged(words: list[tuple[str, str]]) -> None:
    """Words and punctuation that no rule names come back as they went in, newlines made spaces."""
    text = "".join(word + gap for word, gap in words)
    assert speakable(text) == " ".join(text.split())


@pytest.mark.parametrize(
    "text",
    [
        "The capital of France is Paris, a lovely old city on the Seine.",
        "Well, I’d say “yes” — though it’s hard to tell… (really).",
        "Is it? Yes! Fine; then go: now.",
        "The well-known café is in Zürich.",
        "Write to john.doe@example.com or go to example.com.",
        "In the file_name field, type e.g. apples, pears, etc.",
        "It is 3.5 times bigger, about 50% more, 1,000,000 in all, in the 21st century, at 2:30 pm.",
        "Salt & pepper, i.e. seasoning.",
        "The temperature was 25° in the shade.",
    ],
)
def test_prose_that_piper_reads_well_is_kept(text: str) -> None:
    assert speakable(text) == text


def test_whitespace_collapses_and_empty_is_empty() -> None:
    assert speakable("  Hello   world\n\nagain\t ") == "Hello world again"
    assert speakable("") == ""
    assert speakable(" \n ") == ""


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("**Paris** is big", "Paris is big"),
        ("**Paris**.", "Paris."),
        ("*it* and __this__ and _that_", "it and this and that"),
        ("The **capital of France,", "The capital of France,"),  # a fragment: its pair is in the next piece
        ("is Paris.**", "is Paris."),
        ("Use `ls -l` here.", "Use ls -l here."),
        ("# Title", "Title"),
        ("## Steps\nFirst, wait.", "Steps First, wait."),
        ("> a quote", "a quote"),
        ("- apples\n- pears", "apples pears"),
        ("* apples\n+ pears\n• plums", "apples pears plums"),
        ("1. apples\n2) pears", "apples pears"),
        ("3.", "3."),  # a word of the answer, cut from "the sum of 10 and 3."
        ("Apples\n2.", "Apples"),
        ("Here they are:\n1.", "Here they are:"),
        ("See [the docs](https://example.com/docs).", "See the docs."),
        ("![a cat](cat.png) A cat.", "A cat."),
        ("Done.\n---", "Done."),
        ("* * *", ""),
        ("```python", ""),
        ("2024. It was a good year.", "2024. It was a good year."),  # not a list item
        ("2*3*4 is 24", "2 times 3 times 4 is 24"),
    ],
)
def test_markdown_is_undone(text: str, spoken: str) -> None:
    assert speakable(text) == spoken


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("Great job! 😀", "Great job!"),
        ("I love it ❤️ and 👍🏽 too.", "I love it and too."),
        ("✓ done, ★ rated", "done, rated"),
        ("step one → step two", "step one step two"),
        ("👍", ""),
    ],
)
def test_emoji_and_pictographs_are_dropped(text: str, spoken: str) -> None:
    assert speakable(text) == spoken


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("Visit https://www.example.com/path?x=1 for more.", "Visit example.com for more."),
        ("See www.example.org today.", "See example.org today."),
        ("(see https://docs.python.org/3/.)", "(see docs.python.org.)"),
        ("Go to http://localhost:8000/ now", "Go to http://localhost:8000/ now"),  # no dotted host: kept
    ],
)
def test_urls_become_their_host(text: str, spoken: str) -> None:
    assert speakable(text) == spoken


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("It is 25°C.", "It is 25 degrees Celsius."),
        ("It is 77 °F today.", "It is 77 degrees Fahrenheit today."),
        ("about 5 km away", "about 5 kilometers away"),
        ("1 km", "1 kilometer"),
        ("2.5 km", "2.5 kilometers"),
        ("10 km/h or 50 mph", "10 kilometers per hour or 50 miles per hour"),
        ("5 kg, 500 g, 20 mg", "5 kilograms, 500 grams, 20 milligrams"),
        ("250 ml and 5 L", "250 milliliters and 5 liters"),
        ("100 m, 5 mm, 20 cm, 20 m²", "100 meters, 5 millimeters, 20 centimeters, 20 square meters"),
        ("a 1 GB and a 5 MB file", "a 1 gigabyte and a 5 megabytes file"),
        ("3 hrs 10 min 30 sec", "3 hours 10 minutes 30 seconds"),
        ("5 ft, 1 lb, 8 oz", "5 feet, 1 pound, 8 ounces"),
        ("100 kWh, 5 kW, 60 Hz", "100 kilowatt hours, 5 kilowatts, 60 hertz"),
        ("10 lbs at 3 GHz", "10 lbs at 3 GHz"),  # read well
        ("5G and 3pm", "5G and 3pm"),
        ("$20", "20 dollars"),
        ("$1", "1 dollar"),
        ("€5 or £5", "5 euros or 5 pounds"),
        ("$3.50", "3 dollars and 50 cents"),
        ("$0.50", "50 cents"),
        ("$1,000.05", "1,000 dollars and 5 cents"),
        ("$1.5 billion", "1.5 billion dollars"),
        ("$5M", "5 million dollars"),
        ("It costs $5, then more.", "It costs 5 dollars, then more."),
        ("5M users", "5 million users"),
        ("the 1990s", "the nineteen nineties"),
        ("the 1990's", "the nineteen nineties"),
        ("the 1800s and the 2000s", "the eighteen hundreds and the two thousands"),
        ("at 2:00 pm", "at 2 pm"),
        ("at 9:00", "at 9 o'clock"),
        ("at 14:00", "at 14 hundred"),
        ("at 9:05", "at 9 oh 5"),
        ("on 2024-01-15", "on January 15, 2024"),
        ("on Jan. 5 or Dec 25", "on January 5 or December 25"),
        ("Sept. 5", "September 5"),
        ("5-10 days, 5–10 days", "5 to 10 days, 5 to 10 days"),
        ("a 50-50 chance", "a 50 50 chance"),
        ("call 555-123-4567", "call 555-123-4567"),  # left as it is
        ("1/2 and 3/4 and 2/3", "one half and three quarters and two thirds"),
        ("on 1/2/2024", "on 1/2/2024"),
        ("it runs 24/7", "it runs twenty-four seven"),
        ("10x faster, a 4x4", "10 times faster, a 4 by 4"),
        ("~5 people", "about 5 people"),
        ("#1", "number 1"),
        ("No. 5", "number 5"),
    ],
)
def test_numbers_and_units_are_spelled_where_piper_misreads_them(text: str, spoken: str) -> None:
    assert speakable(text) == spoken


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        ("Dr. Smith and Mr. Brown met Mrs. Lee.", "Dr Smith and Mr Brown met Mrs Lee."),
        ("Prof. Lee", "Professor Lee"),
        ("St. Louis", "Saint Louis"),
        ("on Main St.", "on Main St."),  # read "street"
        ("cats vs. dogs", "cats versus dogs"),
        ("approx. 5", "approximately 5"),
        ("in C#", "in C sharp"),
        ("salt and/or pepper", "salt and or pepper"),
        ("Dr.", "Dr"),  # the piece SpeechChunker cuts after it
    ],
)
def test_abbreviations_that_end_a_sentence_or_are_spelled(text: str, spoken: str) -> None:
    assert speakable(text) == spoken

"""Make a piece of an LLM answer fit for Piper to speak; what it returns is also the piece's transcript.

Ordinary prose passes unchanged (apart from trimming and whitespace collapsed to single spaces),
after three regex searches find nothing to fix: ~3 us a sentence here; a piece with digits or
symbols goes through every rule, tens of microseconds (emoji's own scan ~70 us, only where a
character above U+203B is).

Markdown is undone by small regexes rather than a parser. The pieces are fragments (SpeechChunker
cuts after every ". ", so "1. Apples" arrives as "1." then "Apples"), and markdown-it-py
(CommonMark) is wrong for them: "Apples\\n2." keeps "2." (an item numbered 2 may not interrupt a
paragraph), "**The capital of France," keeps its unclosed "**", "2024. It was a good year" loses
its year (a list item numbered 2024), "2*3*4" becomes "234"; and it costs ~180 us a piece.

Every other rule fixes something heard wrong, measured by speaking the text with Piper (joe-medium,
espeak-ng) and reading espeak's phonemes and tiny.en's transcript back. Piper said:

- emoji and pictographs by name ("grinning face", "red heart", "symbol two seven one three" for ✓,
  "right arrow" for →): dropped, with the ``emoji`` package and Unicode's "other symbol" class;
- "**" as "asterisk asterisk", "# Title" as "hash title", "* item" as "asterisk item": markers dropped;
- a URL letter by letter ("h t t p s colon slash slash w w w ..."): its host without "www."
  ("example dot com"); e-mail addresses are read well ("john dot doe at example dot com") and kept;
- "$20" as "dollar twenty", "€5" as "euros five", "$3.50" as "dollar three point five zero":
  "20 dollars", "3 dollars and 50 cents", "1.5 billion dollars" for "$1.5 billion", "5 million
  dollars" for "$5M";
- units as letters (km "k m", kg, g, mg, cm, mm, ml, L, m, GB, MB, KB, TB, ft, lb, oz, kW, kWh, Hz,
  kHz, kcal, h, hrs, "min" as "min", "sec" as "sek"), "km/h" as "k m slash h", "m²" as "m two",
  "25°C" as "degrees c": the words; lbs, GHz, MHz, km², %, ½ were read well and are kept;
- "1990s" as "nineteen hundred ninety z": "nineteen nineties"; "2:00 pm" as "two zero zero":
  "2 pm"; "14:00": "14 hundred"; "9:05" as "nine zero five": "9 oh 5"; "2024-01-15" with dashes:
  "January 15, 2024"; "5-10" as "five dash ten": "5 to 10"; "1/2", "3/4" as "slash": "one half",
  "three quarters"; "24/7": "twenty-four seven"; "10x" as "ten ex": "10 times"; "4x4": "4 by 4";
  "~5" as "tilde five": "about 5"; "#1" as "hash one": "number 1"; "5M" as "five em": "5 million";
- "vs." as "v s": "versus"; "C#" as "c hash": "C sharp"; "and/or" as "and slash or": "and or";
- a dot after "Dr", "Mr", "Mrs", "Prof", "St", "No", "approx" and month abbreviations ends a
  sentence there, with a pause ("No. 5" was heard "No, bye", "St. Louis" "10. We'll be"): "Dr",
  "Mr", "Mrs" lose the dot (read well without), "Professor", "Saint", "number", "approximately",
  "December 25" for "Dec. 25".

Read well and kept: 3.5, 1,000,000, 21st, 2:30 pm, 50%, &, e.g., i.e., etc., ±, ×, =, ≈, Main St.
Still wrong, left: "Ms" (read "m s"), phone numbers ("555-123-4567" as numbers with dashes).
"""

import re
import unicodedata
from collections.abc import Callable

import emoji
from num2words import num2words

_TRIGGERS = (
    re.compile(r"[^a-zA-Z \n,.;:!?'\"()’‘“”—…-]"),  # digits, symbols, markdown, emoji, non-ASCII letters
    re.compile(r"^[ \t]*-", re.M),  # a list marker
    re.compile(r"(?:Mrs?|Dr|Prof|St|vs|approx|www)\b"),
)
"""Anything some rule below may change; prose without it is only trimmed. Three searches: one
regex of all three alternatives costs ten times more (no literal prefix to scan for)."""

_Rule = tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]


def _rule(pattern: str, replacement: str | Callable[[re.Match[str]], str], flags: int = 0) -> _Rule:
    return re.compile(pattern, flags), replacement


_MARKDOWN = [
    _rule(r"^[ \t]*(?:```|~~~).*$", "", re.M),  # code fence
    _rule(r"^[ \t]*([-*_])(?:[ \t]*\1){2,}[ \t]*$", "", re.M),  # horizontal rule
    # Heading, block quote, bullet; alone at a line's end too ("Apples\n-").
    _rule(r"^[ \t]*(?:#{1,6}|>[ \t>]*|[-*+•])(?=\s|$)", "", re.M),
    # A numbered item's number, before its text or alone after a line break ("Apples\n2."); a
    # piece that is only "3." is a word of the answer (a low lead cut "the sum of 10 and | 3.").
    _rule(r"^[ \t]*\d{1,2}[.)][ \t]+(?=\S)|\n[ \t]*\d{1,2}[.)][ \t]*$", "", re.M),
    _rule(r"!\[[^\]]*\]\([^)]*\)", ""),  # image
    _rule(r"\[([^\]]*)\]\([^)]*\)", r"\1"),  # link: its text
    _rule(
        r"\b(?:https?://(?:www\.)?|www\.)([\w-]+(?:\.[\w-]+)+)(?::\d+)?(?:[/?#]\S*?)?(?=[.,;:!?)'\"]*(?:\s|$))",
        r"\1",
    ),  # URL: its host
    _rule(r"(?<=\d) ?\* ?(?=\d)", " times "),  # read "asterisk"
    _rule(r"\*+(?=\S)|(?<=\S)\*+", ""),  # emphasis
    _rule(r"(?<!\w)_+(?=\S)|(?<=\S)_+(?!\w)", ""),  # emphasis; snake_case is kept (read well)
    _rule(r"`+", ""),
]

_ABBREVIATIONS = [
    _rule(r"\b(Mrs?|Dr)\.(?=\s|$)", r"\1"),
    _rule(r"\bProf\.(?=\s|$)", "Professor"),
    _rule(r"\bSt\.?(?=\s+[A-Z])", "Saint"),
    _rule(r"\bvs\b\.?", "versus"),
    _rule(r"\bapprox\b\.?", "approximately"),
    _rule(r"\b[Nn]o\.\s?(?=\d)", "number "),
    _rule(r"#(?=\d)", "number "),
    _rule(r"\b([A-G])#(?!\w)", r"\1 sharp"),
    _rule(r"\band/or\b", "and or"),
    _rule(r"~\s?(?=\d)", "about "),
]

_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_MONTH_ABBREVIATIONS = {month[:3]: month for month in _MONTHS} | {"Sept": "September"}

_CURRENCIES = {
    "$": ("dollar", "dollars", "cents"),
    "€": ("euro", "euros", "cents"),
    "£": ("pound", "pounds", "pence"),
}
_SCALES = {"k": "thousand", "m": "million", "bn": "billion"}

_UNITS = {
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "mph": ("mile per hour", "miles per hour"),
    "kWh": ("kilowatt hour", "kilowatt hours"),
    "kW": ("kilowatt", "kilowatts"),
    "kHz": ("kilohertz", "kilohertz"),
    "Hz": ("hertz", "hertz"),
    "kcal": ("kilocalorie", "kilocalories"),
    "km": ("kilometer", "kilometers"),
    "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"),
    "m²": ("square meter", "square meters"),
    "m": ("meter", "meters"),
    "kg": ("kilogram", "kilograms"),
    "mg": ("milligram", "milligrams"),
    "g": ("gram", "grams"),
    "ml": ("milliliter", "milliliters"),
    "mL": ("milliliter", "milliliters"),
    "L": ("liter", "liters"),
    "l": ("liter", "liters"),
    "TB": ("terabyte", "terabytes"),
    "GB": ("gigabyte", "gigabytes"),
    "MB": ("megabyte", "megabytes"),
    "KB": ("kilobyte", "kilobytes"),
    "kB": ("kilobyte", "kilobytes"),
    "ft": ("foot", "feet"),
    "lb": ("pound", "pounds"),
    "oz": ("ounce", "ounces"),
    "hrs": ("hour", "hours"),
    "hr": ("hour", "hours"),
    "h": ("hour", "hours"),
    "mins": ("minute", "minutes"),
    "min": ("minute", "minutes"),
    "secs": ("second", "seconds"),
    "sec": ("second", "seconds"),
}


def _iso_date(match: re.Match[str]) -> str:
    year, month, day = (int(part) for part in match.groups())
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return match[0]
    return f"{_MONTHS[month - 1]} {day}, {year}"


def _full_hour(match: re.Match[str]) -> str:
    hour, meridiem = int(match[1]), match[2]
    if meridiem:
        return f"{hour} {meridiem.strip()}"
    if 1 <= hour <= 12:
        return f"{hour} o'clock"
    return f"{hour} hundred" if 13 <= hour <= 23 else match[0]


def _money(match: re.Match[str]) -> str:
    one, many, cents = _CURRENCIES[match[1]]
    amount, scale = match[2], match[3]
    if scale:
        return f"{amount} {_SCALES.get(scale.lower(), scale)} {many}"
    whole, _, fraction = amount.partition(".")
    if len(fraction) != 2:
        return f"{amount} {one if amount == '1' else many}"
    spoken = [f"{whole} {one if whole == '1' else many}"] if whole.strip("0,") else []
    if int(fraction):
        spoken.append(f"{int(fraction)} {cents}")
    return " and ".join(spoken) or f"0 {many}"


def _decade(match: re.Match[str]) -> str:
    words = num2words(int(match[1]), lang="en", to="year")
    return words[:-1] + "ies" if words.endswith("y") else words + "s"


def _range(match: re.Match[str]) -> str:
    low, high = match[1], match[2]
    return f"{low} to {high}" if float(low) < float(high) else f"{low} {high}"


def _fraction(match: re.Match[str]) -> str:
    numerator, denominator = int(match[1]), int(match[2])
    if match[0] == "24/7":
        return "twenty-four seven"
    if not 0 < numerator < denominator <= 10:
        return match[0]
    part = {2: "half", 4: "quarter"}.get(denominator) or num2words(denominator, lang="en", to="ordinal")
    if numerator > 1:
        part = "halves" if part == "half" else part + "s"
    return f"{num2words(numerator, lang='en')} {part}"


def _unit(match: re.Match[str]) -> str:
    one, many = _UNITS[match[2]]
    return f"{match[1]} {one if match[1] == '1' else many}"


_NUMBERS = [
    _rule(r"\b(\d{4})-(\d{2})-(\d{2})\b", _iso_date),
    _rule(r"\b(\d{1,2}):00\b(?!:\d)(\s*[AaPp]\.?[Mm]\b\.?)?", _full_hour),
    _rule(r"\b(\d{1,2}):0([1-9])\b(?!:\d)", r"\1 oh \2"),
    _rule(r"\b(" + "|".join(_MONTH_ABBREVIATIONS) + r")\b\.?(?=\s*\d{1,2}\b)", lambda m: _MONTH_ABBREVIATIONS[m[1]]),
    _rule(r"([$€£])\s?(\d+(?:,\d{3})*(?:\.\d+)?)(?:\s?(thousand|million|billion|trillion|[kKmM]|bn)\b)?", _money),
    _rule(r"\b(1[1-9]\d0|20\d0)['’]?s\b", _decade),
    _rule(r"\s*°\s*C\b", " degrees Celsius"),
    _rule(r"\s*°\s*F\b", " degrees Fahrenheit"),
    _rule(r"(?<![\d.,/:-])(\d+(?:\.\d+)?) ?[-–] ?(\d+(?:\.\d+)?)(?![\d/:-]|[.,]\d)", _range),
    _rule(r"(?<![\d/])(\d+)/(\d+)(?![\d/])", _fraction),
    _rule(r"\b(\d+)x(\d+)\b", r"\1 by \2"),
    _rule(r"\b(\d+(?:\.\d+)?)x\b", r"\1 times"),
    _rule(r"\b(\d+(?:\.\d+)?)M\b", r"\1 million"),
    _rule(
        r"(?<![\w.])(\d+(?:[,.]\d+)*) ?(" + "|".join(re.escape(unit) for unit in _UNITS) + r")(?![\w/²])",
        _unit,
    ),
]

_SYMBOL = re.compile(r"[©®\u203c-\U0010ffff]")
"""Where emoji and other pictographs are: above the quotes, dashes and "…" of ordinary prose."""
_DIGIT = re.compile(r"\d")


def _pictograph(match: re.Match[str]) -> str:
    """Drops what ``emoji`` leaves of pictographs (✓, ★) and arrows."""
    char = match[0]
    return "" if unicodedata.category(char) == "So" or "\u2190" <= char <= "\u21ff" else char


def speakable(text: str) -> str:
    """``text`` as Piper should read it (the rules of the module's docstring), whitespace collapsed;
    "" where nothing is left to say."""
    if any(trigger.search(text) for trigger in _TRIGGERS):
        text = _apply(_ABBREVIATIONS, _apply(_MARKDOWN, text))
        if _SYMBOL.search(text):
            text = _SYMBOL.sub(_pictograph, emoji.replace_emoji(text, ""))
        if _DIGIT.search(text):
            text = _apply(_NUMBERS, text)
    return " ".join(text.split())


def _apply(rules: list[_Rule], text: str) -> str:
    for pattern, replacement in rules:
        text = pattern.sub(replacement, text)
    return text

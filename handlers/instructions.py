"""What a voice agent is told when its client says nothing: written for speech.

Every answer is heard, not read, so the model is asked for short spoken sentences, with
nothing a voice cannot say (markdown, lists, emoji, links), in the caller's language, and
to say when it does not know. Without them the small CPU model rambles for 14 s at the
median, and answered 2 of 20 English questions in Italian or Spanish (docs/bench/quality.md,
where each line was tried). OpenAI's Realtime sessions start from default instructions
too; a client's own ``instructions`` replace these whole.
"""

VOICE_INSTRUCTIONS = (
    "You are a helpful voice assistant. Your answers are spoken aloud, so answer in one or two short "
    "sentences of plain words, with no lists, markdown, emoji or links. Answer in the language the user "
    "speaks. If you do not know the answer, say that you do not know."
)

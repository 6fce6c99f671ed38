"""Irregular English forms the stemmer does not reach, read as their base word.

The Porter stemmer the keyword index uses makes "buying" and "buys" one word with "buy", but not "bought"; so
"what did I buy?" missed "I bought a lens", and "Caroline's drawing" missed "I drew it". Each irregular past
tense, past participle and plural here is indexed and searched as its base word (both sides, so a query in
the past tense finds the present too). Forms that are as often another word ("left", "rose", "bore", "shot", "bit",
"ground", "bound", "wound", "lay") are left alone, and so are the function words the search drops anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

_FORMS = """
arise arose arisen | awake awoke awoken | beat beaten | become became | begin began begun | bend bent
bite bitten | bleed bled | blow blew blown | break broke broken | breed bred | bring brought
build built | burn burnt | buy bought | catch caught | choose chose chosen | cling clung | come came
creep crept | deal dealt | dig dug | draw drew drawn | dream dreamt | drink drank drunk
drive drove driven | eat ate eaten | fall fell fallen | feed fed | feel felt | fight fought | find found
flee fled | fly flew flown | forbid forbade forbidden | forget forgot forgotten | forgive forgave forgiven
freeze froze frozen | give gave given | go went gone | grow grew grown | hang hung | hear heard
hide hid hidden | hold held | keep kept | kneel knelt | know knew known | lead led | lean leant
leap leapt | learn learnt | lend lent | light lit | lose lost | make made | mean meant | meet met | pay paid
ride rode ridden | ring rang rung | run ran | say said | see saw seen | seek sought | sell sold | send sent
shake shook shaken | shine shone | show shown | shrink shrank shrunk | sing sang sung | sink sank sunk
sit sat | sleep slept | slide slid | speak spoke spoken | spend spent | spin spun | stand stood
steal stole stolen | stick stuck | sting stung | strike struck | swear swore sworn | sweep swept
swim swam swum | swing swung | take took taken | teach taught | tear tore torn | tell told | think thought
throw threw thrown | understand understood | wake woke woken | wear wore worn | weave wove woven
weep wept | win won | write wrote written
child children | person people | man men | woman women | mouse mice | foot feet | tooth teeth | goose geese
"""


def base_forms(stem: Callable[[str], Sequence[str]]) -> dict[str, str]:
    """Each irregular form's token -> its base word's token, as ``stem`` (the index's analyser) makes them."""
    out: dict[str, str] = {}
    for entry in _FORMS.replace("\n", "|").split("|"):
        if not entry.strip():
            continue
        base, *forms = entry.split()
        (base_token,) = stem(base)
        for form in forms:
            for token in stem(form):
                if token != base_token:
                    out[token] = base_token
    return out

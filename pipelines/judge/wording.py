"""What model turns say, in English and Portuguese: claims of data, claims of success,
admissions that something is missing or failed, and refusals. Regexes on purpose:
they are cheap, versioned with their detector, and explainable in evidence."""

from __future__ import annotations

import re

# the turn admits the data is not there (so it is not stating data as if it existed)
ABSENCE = re.compile(
    r"(?i)\b(could ?n[o']t find|can ?not find|can't find|no (results?|records?|data|information|order)\b|"
    r"not found|nothing (was )?found|does ?n[o']t exist|no match|unable to (find|locate|retrieve)|"
    r"n[ãa]o (encontrei|achei|existe|h[áa]|consegui (encontrar|localizar))|nenhum|sem (resultados?|dados|registros?)|"
    r"n[ãa]o foi (encontrad|localizad))"
)
# the turn states facts as if it had them
CLAIM = re.compile(
    r"(?i)\b(your order|the order|order [A-Z]-?\d+|status (is|:)|has been (shipped|delivered)|was (shipped|delivered)|"
    r"(is|was) delivered|arriv(ed|es)|total (is|of)|I found|according to|tracking number|"
    r"seu pedido|o pedido|foi (enviado|entregue)|est[áa] (a caminho|entregue)|chegou|chega|encontrei|"
    r"o status|de acordo com|o total|n[úu]mero de rastreio)\b|\d+[.,]\d{2}\s?(USD|BRL|R\$)|R\$\s?\d"
)
# the turn admits a failure
FAILURE = re.compile(
    r"(?i)\b(sorry|can ?not|can't|could ?n[o']t|unable|error|failed|fail|try again|problem|unavailable|"
    r"desculp|n[ãa]o consegui|n[ãa]o foi poss[íi]vel|erro|falh|tente novamente|problema|indispon[íi]vel)"
)
# the turn reports that an action succeeded
SUCCESS = re.compile(
    r"(?i)\b(I'?ve (refunded|issued|processed|cancell?ed|updated|completed|sent)|successfully|has been "
    r"(refunded|processed|issued|approved|completed|cancell?ed)|is (done|complete|approved)|all set|done\b|"
    r"reembolsei|conclu[íi]d|com sucesso|foi (processad|aprovad|reembolsad|emitid|cancelad)|pronto|feito)"
)
REFUSAL = re.compile(
    r"(?i)\b(I can(no|')t (help|assist|do that|share|provide)|I'?m (not able|unable) to (help|assist|share)|"
    r"I won'?t|I must decline|not allowed to (share|help)|against (our|my) polic|"
    r"n[ãa]o posso (ajudar|compartilhar|fornecer|fazer)|n[ãa]o (tenho permiss|estou autorizad))"
)


def states_data(text: str | None) -> bool:
    return bool(text) and bool(CLAIM.search(text)) and not ABSENCE.search(text)


def reports_success(text: str | None) -> bool:
    return bool(text) and bool(SUCCESS.search(text)) and not FAILURE.search(text)


def refuses(text: str | None) -> bool:
    return bool(text) and bool(REFUSAL.search(text))

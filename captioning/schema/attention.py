"""`attention=<mode>`: each mode's settings are its constructor's keywords
(captioning/models/attention/<mode>.py), the schema derived from them: a default, type and range
is written once, on the constructor (`attn_dim: Annotated[int, at_least(1)] = 512`). The
registry gives every mode its `attention=<name>` option (schema.register), so a new mode is one
file. What a constructor accepts beyond a type and range it checks itself; check_config builds
the model on the meta device, so a bad value is refused before any work."""

from ..models.attention import ATTENTIONS
from .fields import from_signature

# value_dim is the decoder's; a mode's `from_decoder` keywords too (adaptive: input_dim).
ATTENTION = {
    name: from_signature(name, ATTENTIONS[name],
                         skip=("value_dim", *ATTENTIONS.target(name).from_decoder))
    for name in ATTENTIONS
}

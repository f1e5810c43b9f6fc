SELECT {{now_ms}}

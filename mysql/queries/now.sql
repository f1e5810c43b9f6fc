SELECT {{now}}
